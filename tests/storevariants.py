"""The nine store variants the contract and property suites run on, and how to open each.

memory, SQLite, PostgreSQL, Redis (single, Cluster, Sentinel) and the Django store on
PostgreSQL, MariaDB and SQLite: `VARIANTS` are pytest params carrying each variant's
service marks; `open_variant` opens one store of a variant for the test asking."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from safebeat.stores.django import DjangoStore
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.protocols import Store
from safebeat.stores.redis import RedisStore
from safebeat.stores.sqlite import SqliteStore
from tests import djangosite

VARIANTS = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
    pytest.param("redis-sentinel", marks=pytest.mark.redis),
    pytest.param("django-postgres", marks=[pytest.mark.django, pytest.mark.postgres]),
    pytest.param("django-mariadb", marks=[pytest.mark.django, pytest.mark.mariadb]),
    pytest.param("django-sqlite", marks=pytest.mark.django),
]


def url_of(request: pytest.FixtureRequest, variant: str, tmp_path: object) -> str:
    """The URL a beat of `variant` is given (the memory variant has none: memory://)."""
    if variant == "memory":
        return "memory://"
    if variant == "sqlite":
        return f"sqlite:///{tmp_path}/store.sqlite3"
    if variant.startswith("django-"):
        return f"django://{djangosite.alias_for(request, variant.removeprefix('django-'))}"
    if variant == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(request.getfixturevalue(variant.replace("-", "_") + "_url"))


def open_variant(
    request: pytest.FixtureRequest,
    variant: str,
    tmp_path: object,
    *,
    lock_timeout: timedelta = timedelta(seconds=2),
    **options: Any,
) -> Store:
    """A new store of `variant` (not migrated; not the memory variant, which holds its
    state in the instance: the caller keeps one), `options` passed to SQLite's."""
    url = url_of(request, variant, tmp_path)
    if variant == "sqlite":
        return SqliteStore(url, **options)
    if variant.startswith("django-"):
        return DjangoStore(url, lock_timeout=lock_timeout)
    if variant == "postgres":
        return PostgresStore(url, lock_timeout=lock_timeout)
    if variant.startswith("redis"):
        return RedisStore(url, lock_timeout=lock_timeout)
    raise ValueError(f"no store variant {variant!r}")
