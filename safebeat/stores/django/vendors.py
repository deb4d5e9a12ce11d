"""What differs between the databases Django speaks: the clock, the tick lock, write transactions.

- PostgreSQL: `clock_timestamp()`; `pg_try_advisory_xact_lock` with the same key as the
  `postgresql://` store, inside a transaction that bounds itself with
  `idle_in_transaction_session_timeout`, so a replica frozen while it holds the lock loses
  its session (and the lock) after `safebeat_lock_timeout`. Through psycopg 3 the store
  runs the `postgresql://` store's own statements instead (see `postgres`).
- MySQL / MariaDB: `UTC_TIMESTAMP(6)`; `GET_LOCK(name, 0)`, which belongs to the session,
  not the transaction, so it is released in a `finally` right after the commit. The tick
  and every write transaction set `innodb_lock_wait_timeout`, and on MariaDB
  `idle_transaction_timeout`, which ends a frozen holder's session.
- SQLite: this host's clock; the write lock, taken with `BEGIN IMMEDIATE` and waited for
  only briefly by a tick.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime, timedelta, timezone
from typing import Any

from django.db import DatabaseError, OperationalError, transaction

from safebeat.errors import StoreError
from safebeat.records import system_clock
from safebeat.stores.sql_common import advisory_key
from safebeat.stores.sqlfiles import load_queries

VENDORS = ("postgresql", "mysql", "sqlite")
Q = load_queries(__package__ or "safebeat.stores.django")


class LockBusy(Exception):
    """Another replica holds the tick lock (or, for writes in SQLite, the write lock)."""


def vendor_of(connection: Any, alias: str) -> str:
    """Return the connection's vendor, or raise StoreError naming the alias."""
    vendor = str(connection.vendor)
    if vendor not in VENDORS:
        raise StoreError(
            f"django://{alias}: the {vendor!r} database is not supported; the django:// store "
            "works on PostgreSQL, MySQL/MariaDB and SQLite"
        )
    return vendor


def runs_postgres_statements(connection: Any) -> bool:
    """Whether the store runs the `postgresql://` store's statements on this connection
    (`safebeat.stores.django.postgres`): PostgreSQL through psycopg 3. Through psycopg2,
    and on the other vendors, it runs ORM queries."""
    driver = getattr(connection, "Database", None)
    return connection.vendor == "postgresql" and getattr(driver, "__name__", "") == "psycopg"


def session_lost(connection: Any) -> bool:
    """Whether the database session is gone after an error: the server ended it (e.g. the
    idle-in-transaction timeout of a frozen tick), so psycopg marks the connection closed
    or broken, or Django already dropped the connection because it could not roll back."""
    raw = connection.connection
    if raw is None:
        return True
    return bool(getattr(raw, "broken", False) or getattr(raw, "closed", False))


def clock(connection: Any) -> datetime:
    """The database server's "now" (SQLite: this host's), aware UTC."""
    vendor = connection.vendor
    if vendor == "sqlite":
        return system_clock()
    with connection.cursor() as cursor:
        cursor.execute(Q["postgres_clock" if vendor == "postgresql" else "mysql_clock"])
        (now,) = cursor.fetchone()
    return _utc(now)


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:  # MySQL returns UTC_TIMESTAMP as a naive datetime
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


@contextmanager
def write(
    connection: Any, *, busy_wait: timedelta | None = None, bound: timedelta | None = None
) -> Iterator[None]:
    """A transaction that commits on success; in SQLite it holds the write lock from its start.

    SQLite: `BEGIN IMMEDIATE`, waiting `busy_wait` (default: the connection's own busy
    timeout) for another writer, then Django's "database is locked" error. Inside a
    transaction the caller already opened, it is a savepoint of that transaction.
    With `bound` (the store's lock timeout), a transaction this opens is bounded as a tick
    is: PostgreSQL ends it when it sits idle that long and its statements wait that long
    for a lock; MariaDB ends an idle one too, and MySQL/MariaDB wait for a row lock at
    most that long. (A caller's own transaction keeps the caller's settings.)
    """
    with ExitStack() as stack:
        own = not connection.in_atomic_block
        if connection.vendor == "sqlite" and own:
            stack.enter_context(_begin_immediate(connection, busy_wait))
        if connection.vendor == "mysql" and own and bound is not None:
            stack.enter_context(_mysql_bounds(connection, bound))
        stack.enter_context(transaction.atomic(using=connection.alias))
        if connection.vendor == "postgresql" and own and bound is not None:
            limit = f"{int(bound.total_seconds() * 1000)}ms"
            with connection.cursor() as cursor:
                cursor.execute(Q["postgres_write_limits"], [limit, limit])
        yield


@contextmanager
def _mysql_bounds(connection: Any, bound: timedelta) -> Iterator[None]:
    """Bound this session's row-lock waits (and, on MariaDB, idle transactions) to `bound`
    while the block runs; the server defaults come back after it."""
    seconds = max(1, math.ceil(bound.total_seconds()))
    with connection.cursor() as cursor:
        cursor.execute(Q["mysql_lock_wait"], [seconds])
        if connection.mysql_is_mariadb:
            cursor.execute(Q["mariadb_idle_timeout"], [seconds])
    try:
        yield
    finally:
        with suppress(DatabaseError), connection.cursor() as cursor:
            cursor.execute(Q["mysql_default_lock_wait"])
            if connection.mysql_is_mariadb:
                cursor.execute(Q["mariadb_default_idle_timeout"])


@contextmanager
def _begin_immediate(connection: Any, busy_wait: timedelta | None) -> Iterator[None]:
    """Make the next outermost transaction of a SQLite connection begin IMMEDIATE."""
    connection.ensure_connection()
    raw, mode = connection.connection, connection.transaction_mode
    previous = None
    if busy_wait is not None:
        previous = raw.execute("PRAGMA busy_timeout").fetchone()[0]
        raw.execute(f"PRAGMA busy_timeout = {int(busy_wait.total_seconds() * 1000)}")
    connection.transaction_mode = "IMMEDIATE"  # Django's BEGIN becomes BEGIN IMMEDIATE
    try:
        yield
    finally:
        connection.transaction_mode = mode
        if previous is not None:
            with suppress(Exception):  # the connection may have been closed meanwhile
                raw.execute(f"PRAGMA busy_timeout = {int(previous)}")


@contextmanager
def tick_transaction(
    connection: Any, namespace: str, *, lock_timeout: timedelta, sqlite_wait: timedelta
) -> Iterator[datetime]:
    """Open the tick's transaction holding the namespace's tick lock; yield the store's now.

    Raises LockBusy (before anything is written) when another replica holds the lock.
    Commits when the block ends, rolls back if it raises.
    """
    vendor = connection.vendor
    if vendor == "sqlite":
        with ExitStack() as stack:
            try:
                stack.enter_context(write(connection, busy_wait=sqlite_wait))
            except OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise LockBusy(str(exc)) from exc
                raise
            yield system_clock()
        return
    if vendor == "postgresql":
        with transaction.atomic(using=connection.alias):
            yield _postgres_lock(connection, namespace, lock_timeout)
        return
    name = _mysql_lock_name(connection, namespace)
    locked = False
    try:
        with transaction.atomic(using=connection.alias):
            locked, now = _mysql_lock(connection, name, lock_timeout)
            if not locked:
                raise LockBusy(name)
            yield now
    finally:
        _mysql_release(connection, name, locked=locked)


def _postgres_lock(connection: Any, namespace: str, lock_timeout: timedelta) -> datetime:
    bound = f"{max(1, math.ceil(lock_timeout / timedelta(milliseconds=1)))}ms"  # never 0ms: none
    with connection.cursor() as cursor:
        cursor.execute(Q["postgres_tick_limits"], [bound, bound])
        cursor.execute(Q["postgres_try_tick_lock"], [advisory_key("tick", namespace)])
        locked, now = cursor.fetchone()
    if not locked:
        raise LockBusy(namespace)
    return _utc(now)


def _mysql_lock_name(connection: Any, namespace: str, kind: str = "tick") -> str:
    # GET_LOCK names are server-wide and at most 64 characters: hash the database in too.
    database = str(connection.settings_dict.get("NAME") or "")
    digest = hashlib.sha256(f"{database}\x1f{namespace}".encode()).hexdigest()
    return f"safebeat:{kind}:{digest[:40]}"


@contextmanager
def registration_turn(
    connection: Any, namespace: str, lock_timeout: timedelta
) -> Iterator[Callable[[], bool]]:
    """Around a write transaction, the namespace's registration turn: a function that a
    registration calls before its first write, which waits for another replica's
    registration to end and says True when it has just taken the turn (rows read before
    may have changed since). Two replicas writing the same entries in another order or
    another cut of slices would each wait for rows the other holds; taking turns, they
    wait for each other's end instead. PostgreSQL: the postgresql:// store's
    transaction-scoped advisory lock. MySQL/MariaDB: GET_LOCK, waited for up to
    `lock_timeout` and released when the block ends, after the transaction's end (inside
    a caller's transaction, before its commit). SQLite: the write transaction is the
    turn already (`BEGIN IMMEDIATE`)."""
    vendor, held = connection.vendor, False
    name = _mysql_lock_name(connection, namespace, "register")

    def take() -> bool:
        nonlocal held
        if held or vendor == "sqlite":
            return False
        with connection.cursor() as cursor:
            if vendor == "postgresql":
                cursor.execute(
                    Q["postgres_registration_lock"], [advisory_key("register", namespace)]
                )
            else:
                seconds = max(1, math.ceil(lock_timeout.total_seconds()))
                cursor.execute(Q["mysql_registration_lock"], [name, seconds])
                (taken,) = cursor.fetchone()
                if taken != 1:
                    raise OperationalError(
                        f"another replica has been registering the entries of namespace "
                        f"{namespace!r} for over {seconds} s (GET_LOCK {name!r})"
                    )
        held = True
        return True

    try:
        yield take
    finally:
        if held and vendor == "mysql":
            _release_named_lock(connection, name)


def _release_named_lock(connection: Any, name: str) -> None:
    """Release GET_LOCK `name` through the driver's own connection: Django refuses every
    statement in a transaction marked for rollback (after a refused row), and a lock left
    held would keep every other replica from registering for as long as this session
    lives. Where even that fails, the session is closed, which releases it."""
    try:
        cursor = connection.connection.cursor()
        try:
            cursor.execute(Q["mysql_release_tick_lock"], [name])
            cursor.fetchall()
        finally:
            cursor.close()
    except Exception:  # noqa: BLE001 - whatever failed, the session must not keep the lock
        if not connection.in_atomic_block:
            connection.close()


def _mysql_lock(connection: Any, name: str, lock_timeout: timedelta) -> tuple[bool, datetime]:
    with connection.cursor() as cursor:
        seconds = max(1, math.ceil(lock_timeout.total_seconds()))
        cursor.execute(Q["mysql_lock_wait"], [seconds])
        if connection.mysql_is_mariadb:
            cursor.execute(Q["mariadb_idle_timeout"], [seconds])
        cursor.execute(Q["mysql_try_tick_lock"], [name])
        locked, now = cursor.fetchone()
    return locked == 1, _utc(now)


def _mysql_release(connection: Any, name: str, *, locked: bool) -> None:
    # The lock outlives the transaction: release it whatever happened; a session that is
    # gone has released it already.
    with suppress(DatabaseError), connection.cursor() as cursor:
        if locked:
            cursor.execute(Q["mysql_release_tick_lock"], [name])
        cursor.execute(Q["mysql_default_lock_wait"])
        if connection.mysql_is_mariadb:
            cursor.execute(Q["mariadb_default_idle_timeout"])
