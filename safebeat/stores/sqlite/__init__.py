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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from safebeat.identity import Replica
from safebeat.record_rules import take_over_page
from safebeat.records import (
    Claim,
    Definition,
    Reclaim,
    ReclaimPage,
    Registration,
    StaleClaim,
    TickPlan,
)
from safebeat.stores.protocols import StoreCheck
from safebeat.stores.pruning import in_batches
from safebeat.stores.sql_common import FIRST_STALE, dispatch_rows, replica_columns
from safebeat.stores.sqlfiles import Migration, apply_pending, load_migrations, schema_target
from safebeat.stores.sqlite.admin import SqliteAdmin
from safebeat.stores.sqlite.connection import (
    Q,
    _Busy,
    _instant,
    _us,
    insert_dispatch,
    path_of,
)
from safebeat.stores.sqlite.executions import SqliteExecutions
from safebeat.stores.ticking import Heartbeat, Release, SteppedTick, TickLockBusy, TickSteps

MIGRATIONS = load_migrations(__name__)

#: Definitions per digest read when registering: the names go as one JSON parameter.
REGISTER_SLICE = 5000


class SqliteStore(SteppedTick, SqliteExecutions, SqliteAdmin):
    """Implements `safebeat.stores.protocols.Store` on one SQLite file in WAL mode: the
    connection (`connection.py`), the operator reads (`admin.py`), executions and effects
    (`executions.py`), and here beat's side: migrations, register, tick, heartbeat, prune."""

    def migrate(self) -> int:
        with self._write("migrate") as conn:
            conn.execute(Q["create_version_table"])
            version = int(conn.execute(Q["schema_version"]).fetchone()[0])

            def apply(migration: Migration) -> None:
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                params = {"version": migration.version, "name": migration.name}
                conn.execute(Q["record_migration"], {**params, "now": _us(self.clock())})

            return apply_pending(MIGRATIONS, version, apply)

    expected_schema_version = schema_target(MIGRATIONS)

    def checks(self) -> list[StoreCheck]:
        return []

    def schema_version(self) -> int:
        """Return the applied schema version (0: never migrated)."""
        with self._boundary("read the schema version") as conn:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'safebeat_schema_version'"
            ).fetchone()
            return int(conn.execute(Q["schema_version"]).fetchone()[0]) if exists else 0

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        """Read the stored digests, then write only the new and changed entries."""
        changed: dict[str, str] = {}
        with self._write("register entries") as conn:
            now = self.clock()
            for start in range(0, len(definitions), REGISTER_SLICE):
                part = definitions[start : start + REGISTER_SLICE]
                names = json.dumps([d.name for d in part])
                rows = conn.execute(
                    Q["registered_digests"], {"namespace": namespace, "names": names}
                )
                before = dict(rows.fetchall())
                new = [d for d in part if before.get(d.name) != d.digest]
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
                        for d in new
                    ],
                )
                changed.update((d.name, before[d.name]) for d in new if d.name in before)
        return Registration(changed)

    @contextmanager
    def _tick_transaction(self, namespace: str, replica: Replica) -> Iterator[TickSteps]:
        who = replica_columns(replica)
        try:
            with self._write("tick", busy_timeout=self._tick_lock_wait) as conn:
                now = self.clock()
                yield TickSteps(
                    now=now,
                    load=lambda names: self._load(conn, namespace, names),
                    insert=lambda plan: self._insert(conn, namespace, plan, now, who),
                    advance=lambda advances: self._advance(conn, namespace, advances),
                    reclaim=lambda reclaim: self._reclaim(conn, namespace, reclaim, now, who),
                )
        except _Busy as exc:
            raise TickLockBusy(namespace) from exc

    @staticmethod
    def _advance(
        conn: sqlite3.Connection, namespace: str, advances: Mapping[str, datetime]
    ) -> None:
        conn.executemany(
            Q["advance_state"],
            [
                {"namespace": namespace, "name": name, "window": _us(window)}
                for name, window in advances.items()
            ],
        )

    @staticmethod
    def _insert(
        conn: sqlite3.Connection,
        namespace: str,
        plan: TickPlan,
        now: datetime,
        who: Mapping[str, object],
    ) -> list[Claim]:
        claimed = []
        for row in dispatch_rows(plan):
            row_id = insert_dispatch(conn, namespace, row, now, who, fenced=True)
            entry, window, _, task_id = row[:4]
            if row_id is not None and task_id is not None:
                claimed.append(Claim(row_id, entry, window, task_id, 1))
        return claimed

    @staticmethod
    def _reclaim(
        conn: sqlite3.Connection,
        namespace: str,
        reclaim: Reclaim,
        now: datetime,
        who: Mapping[str, object],
    ) -> tuple[list[Claim], ReclaimPage]:
        after = reclaim.after or FIRST_STALE
        found = conn.execute(
            Q["stale_claims"],
            {
                "namespace": namespace,
                "stale_before": _us(now - reclaim.timeout),
                "now": _us(now),
                "after_at": _us(after.claimed_at),
                "after_id": after.id,
                "page": reclaim.page,
            },
        ).fetchall()
        chosen, page = take_over_page(
            reclaim, [StaleClaim(row[0], row[1], _instant(row[5])) for row in found]
        )
        wanted = set(chosen)
        stale = [row for row in found if row[0] in wanted]
        conn.executemany(Q["reclaim"], [{"id": row[0], "now": _us(now), **who} for row in stale])
        return [Claim(r[0], r[1], _instant(r[2]), r[3], r[4]) for r in stale], page

    def _record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        with self._write("record publishing") as conn:
            now = _us(self.clock())
            conn.executemany(Q["mark_sent"], [{"id": i, "now": now} for i in sent])
            conn.executemany(Q["mark_failed"], [{"id": i, "error": e} for i, e in failed.items()])

    def _release_claims(self, namespace: str, release: Release) -> int:
        with self._write("hand back unsent claims") as conn:
            claimed_at = _us(self.clock() - release.age)
            return sum(
                conn.execute(
                    Q["release_claim"],
                    {"id": i, "attempts": n, "replica": release.replica, "claimed_at": claimed_at},
                ).rowcount
                for i, n in release.attempts.items()
            )

    #: `_heartbeat` applies a delta (`Heartbeat.removed`): beat sends one after a change.
    heartbeat_deltas = True

    def _heartbeat(self, beat: Heartbeat) -> bool:
        with self._write("heartbeat") as conn:
            now = _us(self.clock())
            alive = {"namespace": beat.namespace, "replica": beat.replica.id, "now": now}
            if beat.removed is not None:
                delta = {**alive, "version": beat.version, "patch": beat.patch_json()}
                return bool(conn.execute(Q["patch_definitions"], delta).rowcount)
            if beat.definitions is None:
                return bool(conn.execute(Q["alive"], alive).rowcount)
            conn.execute(
                Q["heartbeat"],
                {
                    "namespace": beat.namespace,
                    **replica_columns(beat.replica),
                    "version": beat.version,
                    "now": now,
                    "definitions": beat.definitions_json(),
                },
            )
            return True

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        with self._write("forget a replica") as conn:
            conn.execute(Q["forget_replica"], {"namespace": namespace, "replica": replica.id})

    def prune(self, namespace: str, before: datetime, *, budget: timedelta | None = None) -> int:
        params = {"namespace": namespace, "before": _us(before), "now": _us(self.clock())}

        def delete_batch(batch: int) -> int:
            with self._write("prune") as conn:
                return int(conn.execute(Q["prune_dispatches"], {**params, "batch": batch}).rowcount)

        deleted = in_batches(delete_batch, budget=budget)
        with self._write("prune") as conn:
            conn.execute(Q["prune_replicas"], params)
            conn.execute(Q["prune_audit"], params)
            deleted += conn.execute(Q["prune_effects"], params).rowcount
        return int(deleted)


def _statements(script: str) -> list[str]:
    """Split a migration into statements (our migrations hold no `;` inside literals)."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


__all__ = ["MIGRATIONS", "SqliteStore", "path_of"]
