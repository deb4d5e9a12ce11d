"""The SQLite store: several beats on ONE host (e.g. `celery worker -B` in several workers).

The tick lock is SQLite's write lock (`BEGIN IMMEDIATE`); claims sit under the same
unique key as in every store. SQLite cannot end the transaction of a frozen process,
so it is for one host only, and its write transactions are kept tiny. "Now" is this
host's clock, which every replica on the host shares. `sqlite:///relative/path` and
`sqlite:////absolute/path` name the file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from safebeat.errors import ConfigError, StoreError, StoreUnavailable
from safebeat.identity import Replica
from safebeat.records import (
    Claim,
    Definition,
    DispatchRecord,
    EntryState,
    NewClaim,
    Outcome,
    Planner,
    Reclaim,
    Registration,
    ReplicaRecord,
    Start,
    Status,
    TickPlan,
    TickResult,
    decide_start,
    states_after,
    system_clock,
)
from safebeat.stores.base import StoreCheck
from safebeat.stores.sql_common import dispatch_rows, replica_columns
from safebeat.stores.sqlfiles import load_migrations, load_queries
from safebeat.urls import redact

Q = load_queries(__name__)
MIGRATIONS = load_migrations(__name__)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _us(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def _instant(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _maybe_instant(micros: int | None) -> datetime | None:
    return None if micros is None else _instant(micros)


def path_of(url: str) -> str:
    """Return the file path in `sqlite:///path` (relative) or `sqlite:////path` (absolute)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or len(url) == len(prefix):
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: write sqlite:///relative/path or "
            "sqlite:////absolute/path"
        )
    return url[len(prefix) :]


def _state(row: Sequence[Any]) -> EntryState:
    name, anchor, defined_at, last_window, digest, schedule, running_since, paused = row
    return EntryState(
        name,
        _instant(anchor),
        _instant(defined_at),
        _maybe_instant(last_window),
        digest,
        schedule,
        _maybe_instant(running_since),
        bool(paused),
    )


def _record(r: Sequence[Any]) -> DispatchRecord:
    return DispatchRecord(
        id=r[0],
        entry=r[1],
        window=_instant(r[2]),
        status=Status(r[3]),
        task_id=r[4],
        task_name=r[5],
        reason=r[6],
        skipped_from=_maybe_instant(r[7]),
        skipped_count=r[8],
        replica=r[9],
        host=r[10],
        pid=r[11],
        claimed_at=_instant(r[12]),
        sent_at=_maybe_instant(r[13]),
        attempts=r[14],
        error=r[15],
        started_at=_maybe_instant(r[16]),
        finished_at=_maybe_instant(r[17]),
        outcome=None if r[18] is None else Outcome(r[18]),
        runtime=None if r[19] is None else timedelta(microseconds=r[19]),
        worker=r[20],
        retries=r[21],
        runs=r[22],
        duplicates=r[23],
    )


class _Busy(StoreUnavailable):
    """Another process held the write lock for longer than the busy timeout."""


class SqliteStore:
    """Implements `safebeat.stores.base.Store` on one SQLite file in WAL mode."""

    def __init__(
        self,
        url: str,
        *,
        busy_timeout: timedelta = timedelta(seconds=5),
        tick_lock_wait: timedelta = timedelta(milliseconds=100),
        clock: Callable[[], datetime] = system_clock,
    ) -> None:
        self.path = path_of(url)
        self.display_url = redact(url)
        self._busy_timeout = busy_timeout.total_seconds()
        # The tick lock is tried, not waited for: if another replica ticks, come back soon.
        self._tick_lock_wait = tick_lock_wait.total_seconds()
        self._clock = clock
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise StoreError(
                    f"SQLite store {self.display_url}: folder {str(parent)!r} does not exist"
                )
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            except ValueError as exc:  # a NUL byte, or text the file system cannot encode
                raise StoreError(
                    f"SQLite store {self.display_url}: cannot open file {self.path!r} ({exc}); "
                    "fix the path in safebeat_url"
                ) from exc
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
        return self._conn

    @contextmanager
    def _write(
        self, action: str, busy_timeout: float | None = None
    ) -> Iterator[sqlite3.Connection]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on error.

        `busy_timeout` (seconds) overrides how long to wait for another writer.
        """
        with self._boundary(action) as conn:
            wait = self._busy_timeout if busy_timeout is None else busy_timeout
            conn.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _boundary(self, action: str) -> Iterator[sqlite3.Connection]:
        """Yield the connection; map sqlite3 errors onto safebeat's."""
        try:
            yield self._connection()
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise _Busy(f"SQLite store {self.display_url}: {action} failed: {text}") from exc
            if "no such table" in text:
                raise StoreError(
                    f"SQLite store {self.display_url}: {action} failed: {text}; "
                    "the schema is missing: run `safebeat migrate`"
                ) from exc
            self.close()
            raise StoreUnavailable(
                f"SQLite store {self.display_url}: {action} failed: {text}"
            ) from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.display_url}: {action} failed: {exc}") from exc

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def migrate(self) -> int:
        with self._write("migrate") as conn:
            conn.execute(Q["create_version_table"])
            version = int(conn.execute(Q["schema_version"]).fetchone()[0])
            for migration in MIGRATIONS:
                if migration.version > version:
                    for statement in _statements(migration.sql):
                        conn.execute(statement)
                    conn.execute(
                        Q["record_migration"],
                        {
                            "version": migration.version,
                            "name": migration.name,
                            "now": _us(self.clock()),
                        },
                    )
                    version = migration.version
            return version

    expected_schema_version = len(MIGRATIONS)

    def checks(self) -> list[StoreCheck]:
        return []

    def schema_version(self) -> int:
        """Return the applied schema version (0: never migrated)."""
        with self._boundary("read the schema version") as conn:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'safebeat_schema_version'"
            ).fetchone()
            return int(conn.execute(Q["schema_version"]).fetchone()[0]) if exists else 0

    def clock(self) -> datetime:
        return self._clock()

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        names = [d.name for d in definitions]
        with self._write("register entries") as conn:
            now = self.clock()
            before = {n: s.digest for n, s in self._load(conn, namespace, names).items()}
            conn.executemany(
                Q["register"],
                [
                    {
                        "namespace": namespace,
                        "name": d.name,
                        "schedule": d.schedule,
                        "digest": d.digest,
                        "anchor": _us(now.replace(microsecond=0)),
                        "now": _us(now),
                        "replica": replica.id,
                    }
                    for d in definitions
                ],
            )
            states = self._load(conn, namespace, names)
        changed = {
            d.name: before[d.name]
            for d in definitions
            if d.name in before and before[d.name] != d.digest
        }
        return Registration(states, changed)

    @staticmethod
    def _load(
        conn: sqlite3.Connection, namespace: str, names: Collection[str]
    ) -> dict[str, EntryState]:
        rows = conn.execute(
            Q["load_states"], {"namespace": namespace, "names": json.dumps(list(names))}
        )
        return {row[0]: _state(row) for row in rows}

    def states(self, namespace: str) -> dict[str, EntryState]:
        with self._boundary("load entry states") as conn:
            rows = conn.execute(Q["all_states"], {"namespace": namespace}).fetchall()
        return {row[0]: _state(row) for row in rows}

    def tick(
        self,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        try:
            with self._write("tick", busy_timeout=self._tick_lock_wait) as conn:
                now = self.clock()
                states = self._load(conn, namespace, names)
                plan = planner(now, states)
                who = replica_columns(replica)
                claimed = self._insert(conn, namespace, plan, now, who)
                conn.executemany(
                    Q["advance_state"],
                    [
                        {"namespace": namespace, "name": name, "window": _us(window)}
                        for name, window in plan.advances.items()
                    ],
                )
                reclaimed = (
                    [] if reclaim is None else self._reclaim(conn, namespace, reclaim, now, who)
                )
        except _Busy:
            return None
        return TickResult(now, states_after(states, plan), claimed, reclaimed, plan)

    @staticmethod
    def _insert(
        conn: sqlite3.Connection,
        namespace: str,
        plan: TickPlan,
        now: datetime,
        who: Mapping[str, object],
    ) -> list[Claim]:
        claimed = []
        for entry, window, status, task_id, task_name, reason, first, count in dispatch_rows(plan):
            row = conn.execute(
                Q["insert_dispatch"],
                {
                    "namespace": namespace,
                    "entry": entry,
                    "window": _us(window),
                    "status": status,
                    "task_id": task_id,
                    "task_name": task_name,
                    "reason": reason,
                    "skipped_from": None if first is None else _us(first),
                    "skipped_count": count,
                    "now": _us(now),
                    **who,
                },
            ).fetchone()
            if row is not None and task_id is not None:
                claimed.append(Claim(row[0], entry, window, task_id, 1))
        return claimed

    @staticmethod
    def _reclaim(
        conn: sqlite3.Connection,
        namespace: str,
        reclaim: Reclaim,
        now: datetime,
        who: Mapping[str, object],
    ) -> list[Claim]:
        stale = conn.execute(
            Q["stale_claims"],
            {
                "namespace": namespace,
                "stale_before": _us(now - reclaim.timeout),
                "names": json.dumps(list(reclaim.entries)),
                "limit": reclaim.limit,
            },
        ).fetchall()
        conn.executemany(Q["reclaim"], [{"id": row[0], "now": _us(now), **who} for row in stale])
        return [Claim(r[0], r[1], _instant(r[2]), r[3], r[4]) for r in stale]

    def record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        if not sent and not failed:
            return
        with self._write("record publishing") as conn:
            now = _us(self.clock())
            conn.executemany(Q["mark_sent"], [{"id": i, "now": now} for i in sent])
            conn.executemany(Q["mark_failed"], [{"id": i, "error": e} for i, e in failed.items()])

    def heartbeat(
        self, namespace: str, replica: Replica, version: str, definitions: Mapping[str, str]
    ) -> None:
        with self._write("heartbeat") as conn:
            conn.execute(
                Q["heartbeat"],
                {
                    "namespace": namespace,
                    **replica_columns(replica),
                    "version": version,
                    "now": _us(self.clock()),
                    "definitions": json.dumps(dict(definitions), sort_keys=True),
                },
            )

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        with self._boundary("list replicas") as conn:
            rows = conn.execute(Q["replicas"], {"namespace": namespace}).fetchall()
        return [
            ReplicaRecord(r[0], r[1], r[2], r[3], _instant(r[4]), _instant(r[5]), json.loads(r[6]))
            for r in rows
        ]

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        with self._write("forget a replica") as conn:
            conn.execute(Q["forget_replica"], {"namespace": namespace, "replica": replica.id})

    def namespaces(self) -> list[str]:
        with self._boundary("list namespaces") as conn:
            return [row[0] for row in conn.execute(Q["namespaces"]).fetchall()]

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        with self._boundary("read history") as conn:
            rows = conn.execute(
                Q["history"], {"namespace": namespace, "entry": entry, "limit": limit}
            ).fetchall()
        return [_record(r) for r in rows]

    def set_paused(self, namespace: str, entry: str, paused: bool) -> bool:
        with self._write("pause an entry") as conn:
            cursor = conn.execute(
                Q["set_paused"], {"namespace": namespace, "name": entry, "paused": int(paused)}
            )
            return cursor.rowcount == 1

    def claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], *, replica: Replica, reason: str
    ) -> list[Claim]:
        inserted = []
        with self._write("claim windows") as conn:
            now = _us(self.clock())
            for claim in claims:
                row = conn.execute(
                    Q["insert_dispatch"],
                    {
                        "namespace": namespace,
                        "entry": claim.entry,
                        "window": _us(claim.window),
                        "status": Status.CLAIMED.value,
                        "task_id": claim.task_id,
                        "task_name": claim.task_name,
                        "reason": reason,
                        "skipped_from": None,
                        "skipped_count": None,
                        "now": now,
                        **replica_columns(replica),
                    },
                ).fetchone()
                if row is not None:
                    inserted.append(Claim(row[0], claim.entry, claim.window, claim.task_id, 1))
        return inserted

    def start_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        stale_after: timedelta,
    ) -> Start:
        key = {"namespace": namespace, "entry": entry, "window": _us(window)}
        with self._write("record the start of an execution") as conn:
            row = conn.execute(Q["execution_of"], key).fetchone()
            if row is None:
                return Start.UNKNOWN
            row_id, started_at, finished_at, recorded_retries = row
            now = self.clock()
            verdict = decide_start(
                started_at=_maybe_instant(started_at),
                finished_at=_maybe_instant(finished_at),
                recorded_retries=recorded_retries,
                retries=retries,
                now=now,
                stale_after=stale_after,
            )
            if verdict is Start.DUPLICATE:
                conn.execute(Q["count_duplicate"], {"id": row_id})
                return Start.DUPLICATE
            conn.execute(
                Q["start_execution"],
                {"id": row_id, "now": _us(now), "worker": worker, "retries": retries},
            )
            return verdict

    def finish_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        outcome: Outcome,
        runtime: timedelta,
        detail: str | None = None,
    ) -> None:
        with self._write("record the end of an execution") as conn:
            conn.execute(
                Q["finish_execution"],
                {
                    "namespace": namespace,
                    "entry": entry,
                    "window": _us(window),
                    "worker": worker,
                    "retries": retries,
                    "outcome": outcome.value,
                    "runtime": runtime // timedelta(microseconds=1),
                    "detail": detail,
                    "now": _us(self.clock()),
                },
            )

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        with self._write("claim an effect key") as conn:
            now = self.clock()
            row = conn.execute(
                Q["claim_effect"],
                {
                    "namespace": namespace,
                    "key": key,
                    "owner": owner,
                    "task_id": task_id,
                    "now": _us(now),
                    "expires_at": _us(now + keep_for),
                },
            ).fetchone()
        return row is not None

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        with self._write("release an effect key") as conn:
            deleted = conn.execute(
                Q["release_effect"], {"namespace": namespace, "key": key, "owner": owner}
            ).rowcount
        return bool(deleted)

    def prune(self, namespace: str, before: datetime) -> int:
        with self._write("prune") as conn:
            params = {"namespace": namespace, "before": _us(before), "now": _us(self.clock())}
            deleted = conn.execute(Q["prune_dispatches"], params).rowcount
            conn.execute(Q["prune_replicas"], params)
            deleted += conn.execute(Q["prune_effects"], params).rowcount
        return int(deleted)


def _statements(script: str) -> list[str]:
    """Split a migration into statements (our migrations hold no `;` inside literals)."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
