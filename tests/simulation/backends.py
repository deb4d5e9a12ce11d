"""The store a simulated history runs against, on the simulator's clock.

`memory` (the default) is the fastest. `sqlite`, `postgres` and `redis` run the same seed
against the real backend, so the rules written in SQL and Lua meet the same histories:
each seed gets a store of its own (a fresh SQLite file; a fresh schema in a PostgreSQL
database of the process's own; the process's own redis-server, emptied after each seed),
and each reads "now" from the simulated clock:

- SQLite takes its clock from the caller already (`SqliteStore(url, clock=...)`): the
  statements receive `:now` as a parameter.
- PostgreSQL reads `clock_timestamp()` in its statements. The database has a
  `clock_timestamp()` of its own in `public`, ahead of `pg_catalog` on the database's
  `search_path`, which returns the simulated time kept in a one-row table; the simulator
  writes that row (on a connection of its own) before a store call whenever it changed.
  The store's SQL runs unchanged.
- Redis reads `TIME` in one Lua helper (`now_us`). The simulated store registers the
  same scripts with that helper reading a key the simulator sets instead; the store's
  `clock()` reads the same key. The rules run unchanged. The tick lock's TTL stays in
  real time: it is taken and released within one store call, which the simulator never
  interrupts.

Each simulated process (a beat, a worker) opens a store of its own, as in production;
the simulator runs one store call at a time and never stops inside one.

A seed decides the same settings, faults and draws on every store; where a store returns
rows in another order (claims, take-overs: the contract leaves it open), the history
goes on in another order from there, so a seed's trace may differ between stores.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from safebeat.identity import format_window
from safebeat.record_rules import lease_alive
from safebeat.records import DispatchRecord, TickResult

#: The backends `--store` accepts.
STORES = ("memory", "sqlite", "postgres", "redis")

Clock = Callable[[], datetime]
Log = Callable[[str], None]

#: Every row the simulation reads back (far more than a history makes).
ALL_ROWS = 1_000_000
#: Store calls that never read the clock (beat asks on every tick): not worth a write of
#: the simulated time; the next call that reads the clock writes it.
CLOCKLESS = frozenset({"runtime_version"})


class Backend(Protocol):
    """One seed's store and what the simulator needs around it."""

    name: str
    store: Any
    #: Take-overs that took a run still holding a live lease (for the diagnosis).
    live_takeovers: set[str]

    def connect(self) -> Any:
        """The store as one simulated process holds it (its own connection)."""
        ...

    def call(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one store call with the store's "now" set to the simulated time."""
        ...

    def rows(self, namespace: str, entry: str | None = None) -> list[DispatchRecord]:
        """The dispatch rows, as the store holds them now."""
        ...

    def close(self) -> None:
        """Close the store and remove what this seed created."""
        ...


class RealBackend:
    """A real store, one connection per simulated process (`connect`) as in production,
    and one of the simulator's own (`store`, what it reads the rows with); notes the live
    take-overs by reading the rows around each tick."""

    name = "real"

    def __init__(self, opener: Callable[[], Any], clock: Clock, namespace: str, log: Log) -> None:
        self._opener = opener
        self.store = opener()
        self._opened = [self.store]
        self.live_takeovers: set[str] = set()
        self._clock = clock
        self._namespace = namespace
        self._log = log

    def connect(self) -> Any:
        store = self._opener()
        self._opened.append(store)
        return store

    def sync(self) -> None:
        """Make the store's clock read the simulated time (nothing to do by default)."""

    def call(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if name not in CLOCKLESS:
            self.sync()
        if name != "tick" or kwargs.get("reclaim") is None:
            return method(*args, **kwargs)
        before = self._clock()
        alive = {
            (r.entry, r.window)
            for r in self.rows(self._namespace)
            if r.started_at is not None
            and r.finished_at is None
            and lease_alive(r.lease_until, before)
        }
        result = method(*args, **kwargs)
        if isinstance(result, TickResult):
            for claim in result.reclaimed:
                if (claim.entry, claim.window) in alive:
                    key = f"{claim.entry}@{format_window(claim.window)}"
                    self.live_takeovers.add(key)
                    self._log(f"(a take-over of {key} whose run holds a live lease)")
        return result

    def rows(self, namespace: str, entry: str | None = None) -> list[DispatchRecord]:
        self.sync()
        return list(self.store.history(namespace, entry, ALL_ROWS))

    def close(self) -> None:
        for store in self._opened:
            store.close()


class SqliteBackend(RealBackend):
    name = "sqlite"

    def __init__(self, clock: Clock, namespace: str, log: Log) -> None:
        from safebeat.stores.sqlite import SqliteStore

        self._folder = tempfile.TemporaryDirectory(prefix="safebeat-sim-")
        path = Path(self._folder.name) / "store.db"
        url = f"sqlite:///{path}"
        super().__init__(lambda: SqliteStore(url, clock=clock), clock, namespace, log)

    def close(self) -> None:
        super().close()
        self._folder.cleanup()


#: The simulated `clock_timestamp()`: the simulated time, read on every call (VOLATILE,
#: like the one in pg_catalog it stands in front of), in `public`.
_PG_CLOCK = """
CREATE TABLE public.safebeat_sim_clock (now timestamptz NOT NULL);
INSERT INTO public.safebeat_sim_clock VALUES ('2000-01-01T00:00:00Z');
CREATE FUNCTION public.clock_timestamp() RETURNS timestamptz
    LANGUAGE sql VOLATILE AS 'SELECT now FROM public.safebeat_sim_clock';
"""
#: The schema a seed's tables live in, made afresh for each seed.
_PG_SCHEMA = "safebeat_sim"

_pg: list[tuple[str, Any]] = []


def _pg_database() -> tuple[str, Any]:
    """This process's own database (its URL, and a connection that sets its clock),
    created once and dropped when the process ends; each seed has a fresh schema in it.
    Advisory locks are per database: simulations running at once never share one."""
    if not _pg:
        import psycopg

        from tests import runscope, services

        admin = services.postgres_admin_url()
        database = runscope.database("sim", str(os.getpid()))
        url = services.create_database(admin, database)
        atexit.register(services.drop_database, admin, database)
        setter = psycopg.connect(url, autocommit=True)
        setter.execute(_PG_CLOCK)
        # The store's sessions (opened after this) find the seed's tables first, then the
        # simulated clock_timestamp(), then pg_catalog. A commit does not wait for its WAL
        # flush: no server crashes here, and what a commit makes visible is the same.
        path = f"search_path = {_PG_SCHEMA}, public, pg_catalog"
        for setting in (path, "synchronous_commit = off"):
            setter.execute(f'ALTER DATABASE "{database}" SET {setting}')
        setter.execute("SET synchronous_commit = off")
        _pg.append((url, setter))
    return _pg[0]


class PostgresBackend(RealBackend):
    name = "postgres"

    def __init__(self, clock: Clock, namespace: str, log: Log) -> None:
        from safebeat.stores.postgres import PostgresStore

        url, self._setter = _pg_database()
        self._setter.execute(f"DROP SCHEMA IF EXISTS {_PG_SCHEMA} CASCADE")
        self._setter.execute(f"CREATE SCHEMA {_PG_SCHEMA}")
        self._written: datetime | None = None
        super().__init__(lambda: PostgresStore(url), clock, namespace, log)

    def sync(self) -> None:
        now = self._clock()
        if now != self._written:
            self._setter.execute("UPDATE public.safebeat_sim_clock SET now = %s", (now,))
            self._written = now


class RedisBackend(RealBackend):
    name = "redis"

    def __init__(self, clock: Clock, namespace: str, log: Log) -> None:
        from tests.simulation.redis_clock import SimRedisStore

        self._written: datetime | None = None
        self._url = _redis_server().url
        super().__init__(lambda: SimRedisStore(self._url), clock, namespace, log)

    def sync(self) -> None:
        now = self._clock()
        if now != self._written:
            self.store.set_now(now)
            self._written = now

    def close(self) -> None:
        import redis

        super().close()
        with redis.Redis.from_url(self._url) as client:
            client.flushall()  # the server is this process's own


_redis: list[Any] = []


def _redis_server() -> Any:
    """This process's own redis-server (flushed after each seed), started once."""
    if not _redis:
        from tests import services

        _redis.append(services.start_redis_server())
    return _redis[0]


class MemoryBackend:
    """The memory store (the simulator's `SimStore`, which notes live take-overs itself)."""

    name = "memory"

    def __init__(self, store: Any) -> None:
        self.store = store
        self.live_takeovers: set[str] = store.live_takeovers

    def connect(self) -> Any:
        return self.store  # the memory store stands for the server every process shares

    def call(self, name: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    def rows(self, namespace: str, entry: str | None = None) -> list[DispatchRecord]:
        return list(self.store.history(namespace, entry, ALL_ROWS))

    def close(self) -> None:
        pass


class _MemoryFactory(Protocol):
    def __call__(self, clock: Clock) -> Any: ...


def open_backend(
    kind: str,
    *,
    clock: Clock,
    namespace: str,
    log: Log,
    memory: _MemoryFactory,
) -> Backend:
    """A fresh store of `kind` for one seed, reading "now" from `clock`."""
    if kind == "memory":
        return MemoryBackend(memory(clock))
    if kind == "sqlite":
        return SqliteBackend(clock, namespace, log)
    if kind == "postgres":
        return PostgresBackend(clock, namespace, log)
    if kind == "redis":
        return RedisBackend(clock, namespace, log)
    raise ValueError(f"unknown store {kind!r}; known: {', '.join(STORES)}")
