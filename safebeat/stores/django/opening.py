"""Opening a `django://` store: the implementation is picked once, by the alias's database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from safebeat.stores.django import vendors
from safebeat.stores.django.base import OpenedDjangoStore, alias_of, connection_of


def open_django_store(
    url: str = "django://",
    *,
    lock_timeout: timedelta = timedelta(seconds=5),
    tick_lock_wait: timedelta = timedelta(milliseconds=100),
) -> OpenedDjangoStore:
    """Return the Django store for `url`, its implementation chosen by the alias's database.

    Reads the alias's settings (setting Django up if needed; StoreError naming what is
    missing) but does not connect.
    """
    if vendors.runs_postgres_statements(connection_of(alias_of(url))):
        from safebeat.stores.django.postgres import DjangoPostgresStore  # noqa: PLC0415

        return DjangoPostgresStore(url, lock_timeout=lock_timeout, tick_lock_wait=tick_lock_wait)
    from safebeat.stores.django.orm import DjangoOrmStore  # noqa: PLC0415

    return DjangoOrmStore(url, lock_timeout=lock_timeout, tick_lock_wait=tick_lock_wait)


class DjangoStore:
    """`DjangoStore(url, ...)` is `open_django_store(url, ...)`: the store that fits the
    alias's database, a `DjangoPostgresStore` or a `DjangoOrmStore`."""

    def __new__(cls, url: str = "django://", **settings: Any) -> Any:
        return open_django_store(url, **settings)
