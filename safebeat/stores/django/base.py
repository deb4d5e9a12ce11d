"""The Django store's database: one alias, its error boundary, its migrations.

Both implementations (`DjangoPostgresStore`, `DjangoOrmStore`; `opening.py` picks one
when the store is opened) are `DjangoDatabase` underneath: the alias, the boundary that
maps `django.db` errors onto safebeat's, and the check that the app's migrations are
applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Protocol

from safebeat.errors import StoreError, StoreUnavailable
from safebeat.store_urls import django_alias
from safebeat.stores.django import vendors
from safebeat.stores.django.setup import django_models, known_migrations, migration_state
from safebeat.stores.protocols import Store, StoreCheck
from safebeat.stores.refusals import refusal_hint


class OpenedDjangoStore(Store, Protocol):
    """What opening a Django store gives: a `Store` on the alias's database."""

    alias: str


def alias_of(url: str) -> str:
    """Return the database alias `django://alias` names (`default` for `django://`).

    Raise ConfigError naming the redacted URL when it can't be read or has a password.
    """
    return django_alias(url)


def connection_of(alias: str) -> Any:
    """The alias's Django connection (StoreError naming what Django lacks); no connecting."""
    django_models(alias)  # raises StoreError naming what Django lacks
    from django.db import connections  # noqa: PLC0415

    connection = connections[alias]
    vendors.vendor_of(connection, alias)
    return connection


class DjangoDatabase:
    """A Django store on one database alias (its implementations build on this)."""

    def __init__(
        self,
        url: str = "django://",
        *,
        lock_timeout: timedelta = timedelta(seconds=5),
        tick_lock_wait: timedelta = timedelta(milliseconds=100),
    ) -> None:
        self.alias = alias_of(url)
        self.display_url = f"django://{self.alias}"
        self._lock_timeout = lock_timeout
        self._tick_lock_wait = tick_lock_wait

    @property
    def vendor(self) -> str:
        """The database's vendor: `postgresql`, `mysql` (MariaDB too) or `sqlite`."""
        return vendors.vendor_of(self._connection(), self.alias)

    @contextmanager
    def _boundary(self, action: str) -> Iterator[Any]:
        """Yield this thread's connection; map Django's database errors onto safebeat's."""
        from django.db import DatabaseError, InterfaceError, OperationalError  # noqa: PLC0415

        connection = self._connection()
        try:
            yield connection
        except vendors.LockBusy:
            raise
        except (OperationalError, InterfaceError) as exc:
            if _missing_table(exc):
                raise self._schema_missing(action, exc) from exc
            if not connection.in_atomic_block:
                connection.close()  # reconnect on the next call
            hint = refusal_hint(exc, where=f"of the DATABASES[{self.alias!r}] setting")
            if hint is not None:  # a configuration error: retrying will not help
                raise StoreError(f"{self._message(action, exc)}; {hint}") from exc
            raise StoreUnavailable(self._message(action, exc)) from exc
        except DatabaseError as exc:
            if _missing_table(exc):
                raise self._schema_missing(action, exc) from exc
            if vendors.session_lost(connection):
                # The server ended the session (e.g. PostgreSQL's idle-in-transaction
                # timeout, an InternalError): unreachable, as the postgresql:// store says.
                if not connection.in_atomic_block:
                    connection.close()  # reconnect on the next call
                raise StoreUnavailable(self._message(action, exc)) from exc
            raise StoreError(self._message(action, exc)) from exc

    def _connection(self) -> Any:
        return connection_of(self.alias)

    def _message(self, action: str, exc: BaseException) -> str:
        detail = str(exc).strip() or type(exc).__name__
        return f"Django store {self.display_url}: {action} failed: {detail}"

    def _schema_missing(self, action: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"{self._message(action, exc)}; the schema is missing: run "
            f"`python manage.py migrate safebeat --database {self.alias}`"
        )

    def close(self) -> None:
        """Nothing to release: the connections are Django's (closed by Django or Celery)."""

    def migrate(self) -> int:
        """Check that this app's migrations are applied; Django's `migrate` applies them.

        Returns the schema version; raises StoreError naming the command otherwise.
        """
        with self._boundary("read the migration state") as connection:
            applied, known = migration_state(connection)
        missing = [name for name in known if name not in applied]
        if missing:
            raise StoreError(
                f"Django store {self.display_url}: migrations {', '.join(missing)} of "
                "safebeat.contrib.django are not applied: run "
                f"`python manage.py migrate safebeat --database {self.alias}`"
            )
        return len(known)

    @property
    def expected_schema_version(self) -> int:
        """How many migrations of safebeat.contrib.django this safebeat ships."""
        return len(known_migrations(self.alias))

    def schema_version(self) -> int:
        """How many of those are applied (Django's `migrate` applies them)."""
        with self._boundary("read the migration state") as connection:
            applied, known = migration_state(connection)
        return len(applied & set(known))

    def checks(self) -> list[StoreCheck]:
        return []


def _missing_table(exc: BaseException) -> bool:
    """Whether a driver error says that one of the tables does not exist (any vendor)."""
    text = str(exc).lower()
    return (
        "no such table" in text  # SQLite
        or ("relation" in text and "does not exist" in text)  # PostgreSQL
        or ("table" in text and "doesn't exist" in text)  # MySQL / MariaDB
    )
