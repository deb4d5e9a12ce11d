"""Store backends, chosen by the scheme of `safebeat_url`."""

from __future__ import annotations

import threading
from datetime import timedelta

from safebeat.config import Config, RedisEviction
from safebeat.stores.base import Store
from safebeat.urls import backend_of, check_utf8

_memory_stores: dict[str, Store] = {}
_memory_mutex = threading.Lock()


def open_store(
    url: str,
    *,
    lock_timeout: timedelta = timedelta(seconds=5),
    redis_eviction: RedisEviction = "warn",
) -> Store:
    """Return the store for `url`. Nothing connects until the store is first used.

    `redis_eviction` (warn, refuse or ignore) says what a Redis store does when the
    server's eviction policy could delete claims.
    """
    backend = backend_of(url)
    if backend == "postgres":
        from safebeat.stores.postgres import PostgresStore  # noqa: PLC0415 - optional extra

        check_utf8(url)  # else psycopg's UnicodeDecodeError on first use

        return PostgresStore(url, lock_timeout=lock_timeout)
    if backend == "redis":
        from safebeat.stores.redis import RedisStore  # noqa: PLC0415

        return RedisStore(url, lock_timeout=lock_timeout, eviction=redis_eviction)
    if backend == "sqlite":
        from safebeat.stores.sqlite import SqliteStore  # noqa: PLC0415

        return SqliteStore(url)
    if backend == "django":
        from safebeat.stores.django import open_django_store  # noqa: PLC0415

        return open_django_store(url, lock_timeout=lock_timeout)
    from safebeat.stores.memory import MemoryStore  # noqa: PLC0415

    # One memory store per URL and process, so schedulers in one process share it.
    with _memory_mutex:
        if url not in _memory_stores:
            _memory_stores[url] = MemoryStore()
        return _memory_stores[url]


def store_from_config(config: Config) -> Store:
    """Return the store `config` names, with the settings that shape it."""
    return open_store(
        config.url, lock_timeout=config.lock_timeout, redis_eviction=config.redis_eviction
    )


__all__ = ["Store", "open_store", "store_from_config"]
