"""Store backends, chosen by the scheme of `safebeat_url`.

Besides the built-in schemes, a distribution can add one through the `safebeat.stores`
entry point group: the entry point's name is the scheme, its object a `StoreOpener` (a
store class whose constructor takes these arguments, or a function), for example in its
`pyproject.toml`::

    [project.entry-points."safebeat.stores"]
    mystore = "mypackage.store:MyStore"

The object is imported when a URL of its scheme is first opened. What it returns
implements `safebeat.stores.protocols.Store`; `safebeat.testing.stores.StoreContract` is the
suite that checks it.
"""

from __future__ import annotations

import inspect
import threading
from datetime import timedelta
from typing import Protocol

from safebeat.config import Config, RedisEviction
from safebeat.errors import ConfigError
from safebeat.store_urls import (
    ENTRY_POINT_GROUP,
    PLUGIN,
    backend_of,
    check_utf8,
    plugin_schemes,
    redact,
    scrub,
)
from safebeat.stores.protocols import Store

_memory_stores: dict[str, Store] = {}
_memory_mutex = threading.Lock()


class StoreOpener(Protocol):
    """What a `safebeat.stores` entry point names: called with the URL (its scheme the
    entry point's name, in any case) and the tick lock timeout, it returns a `Store`
    without connecting (nothing connects until the store is first used). It raises
    `ConfigError` for a URL it cannot read, with its password hidden
    (`safebeat.store_urls.redact`)."""

    def __call__(self, url: str, *, lock_timeout: timedelta) -> Store: ...


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
    if backend == PLUGIN:
        return _open_plugin(url, lock_timeout=lock_timeout)
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


#: What every store has (the methods and attributes of `Store`'s protocols), checked on
#: what a plugin returns, so a missing one is named when the store is opened rather than
#: when beat first calls it.
_STORE_METHODS = tuple(
    sorted(
        {
            name
            for klass in Store.__mro__
            if klass.__module__ == Store.__module__
            for name in (*vars(klass), *vars(klass).get("__annotations__", {}))
            if not name.startswith("_")
        }
    )
)


def _has(store: object, name: str) -> bool:
    """Whether `store` has `name`, found without running a property (that might connect),
    or else through its `__getattr__` (a store delegating to another)."""
    try:
        inspect.getattr_static(store, name)
    except AttributeError:
        return hasattr(store, name)
    return True


def _open_plugin(url: str, *, lock_timeout: timedelta) -> Store:
    """Open `url` with the store plugin its scheme names, or raise ConfigError naming the
    entry point and its distribution."""
    plugin = plugin_schemes()[url.split("://", 1)[0].lower()]
    where = (
        f"the store plugin for {plugin.scheme}:// (entry point "
        f"{plugin.entry_point.name} = {plugin.entry_point.value} of group "
        f"{ENTRY_POINT_GROUP}, distribution {plugin.distribution})"
    )
    try:
        opener: StoreOpener = plugin.entry_point.load()
    except Exception as exc:  # whatever the plugin raises while imported
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: {where} cannot be imported: "
            f"{type(exc).__name__}: {scrub(str(exc), url)}"
        ) from exc
    try:
        store = opener(url, lock_timeout=lock_timeout)
    except ConfigError as exc:  # said for the user already; its password hidden still
        shown = scrub(str(exc), url)
        if shown == str(exc):
            raise
        raise ConfigError(shown) from exc
    except Exception as exc:  # the plugin's own failure, named as the plugin's
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: {where} failed to open the store: "
            f"{type(exc).__name__}: {scrub(str(exc), url)}"
        ) from exc
    missing = [name for name in _STORE_METHODS if not _has(store, name)]
    if missing:
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: {where} returned a {type(store).__name__}, "
            f"which lacks {', '.join(missing)} of safebeat.stores.protocols.Store"
        )
    return store


def store_from_config(config: Config) -> Store:
    """Return the store `config` names, with the settings that shape it."""
    return open_store(
        config.url, lock_timeout=config.lock_timeout, redis_eviction=config.redis_eviction
    )


__all__ = ["Store", "StoreOpener", "open_store", "store_from_config"]
