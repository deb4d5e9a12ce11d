"""The Django store with ORM queries: MySQL/MariaDB, SQLite, PostgreSQL through psycopg2.

The tick lock fits the vendor (see `safebeat.stores.django.vendors`); the claim is the
same on all of them: every window's row is inserted with `bulk_create(ignore_conflicts=
True)` (`ON CONFLICT DO NOTHING`, MySQL's `INSERT IGNORE`) under the unique key
`(namespace, entry, window_at)`, and the rows this tick inserted are read back by this
replica's id and the tick's instant. A tick costs the same few round trips however many
entries are due. `write_windows` (windows triggered or backfilled by hand) writes the
same way, without the tick lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from safebeat.identity import Replica
from safebeat.records import Definition, Registration
from safebeat.stores.django import vendors
from safebeat.stores.django.orm.admin import DjangoOrmAdmin
from safebeat.stores.django.orm.executions import DjangoOrmExecutions
from safebeat.stores.django.orm.tick import DjangoOrmTick
from safebeat.stores.django.setup import django_models
from safebeat.stores.pruning import in_batches
from safebeat.stores.sql_common import replica_columns
from safebeat.stores.ticking import Heartbeat, Release

#: Definitions per digest read when registering: within any database's parameter limit.
REGISTER_SLICE = 1000


class DjangoOrmStore(DjangoOrmTick, DjangoOrmExecutions, DjangoOrmAdmin):
    """Implements `safebeat.stores.protocols.Store` with Django's ORM on one database alias:
    shared reads in `rows.py`, the tick's steps in `tick.py`, operator reads in
    `admin.py`, executions and effects in `executions.py`, the rest of beat's side
    (register, publishes, heartbeat, prune) here."""

    def clock(self) -> datetime:
        with self._boundary("read the clock") as connection:
            return vendors.clock(connection)

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        """Read the stored digests a slice at a time, then write only what differs; the
        first write waits for the namespace's registration turn (`vendors.registration_turn`)."""
        self._check_lengths(namespace, [d.name for d in definitions])
        changed: dict[str, str] = {}
        # The turn outlives the write transaction: on MySQL/MariaDB it is released after
        # the commit (or rollback), so the next replica reads what this one wrote.
        with (
            self._boundary("register entries") as connection,
            vendors.registration_turn(connection, namespace, self._lock_timeout) as turn,
            vendors.write(connection, bound=self._lock_timeout),
        ):
            now = vendors.clock(connection)
            for start in range(0, len(definitions), REGISTER_SLICE):
                part = definitions[start : start + REGISTER_SLICE]
                changed.update(self._register_slice(namespace, part, replica, now, turn=turn))
        return Registration(changed)

    def _register_slice(
        self,
        namespace: str,
        part: Sequence[Definition],
        replica: Replica,
        now: datetime,
        *,
        turn: Callable[[], bool],
    ) -> dict[str, str]:
        """Register `part`; return its changed entries with their former digests."""
        from django.db.models import Case, F, Q, Value, When  # noqa: PLC0415

        m = django_models(self.alias)
        entries = m.Entry.objects.using(self.alias)
        names = [d.name for d in part]

        def stored() -> dict[str, str]:
            return dict(
                entries.filter(namespace=namespace, name__in=names).values_list("name", "digest")
            )

        before = stored()
        if any(before.get(d.name) != d.digest for d in part) and turn():
            before = stored()  # another replica may have registered meanwhile: read again
        entries.bulk_create(
            [
                m.Entry(
                    namespace=namespace,
                    name=d.name,
                    schedule=d.schedule,
                    digest=d.digest,
                    anchor=now.replace(microsecond=0),
                    defined_at=now,
                    registered_by=replica.id,
                )
                for d in part
                if d.name not in before
            ],
            ignore_conflicts=True,
        )
        changed = {d.name: before[d.name] for d in part if before.get(d.name, d.digest) != d.digest}
        for d in part:
            if d.name in changed:
                # Conditional on the stored row, as a concurrent register may have won.
                entries.filter(Q(namespace=namespace, name=d.name) & ~Q(digest=d.digest)).update(
                    # First: MySQL assigns left to right, seeing the new schedule after.
                    defined_at=Case(
                        When(~Q(schedule=d.schedule), then=Value(now)),
                        default=F("defined_at"),
                    ),
                    schedule=d.schedule,
                    digest=d.digest,
                    registered_by=replica.id,
                )
        return changed

    def _record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        from django.db.models import Case, F, TextField, Value, When  # noqa: PLC0415

        m = django_models(self.alias)
        with self._write("record publishing") as connection:
            now = vendors.clock(connection)
            rows = m.Dispatch.objects.using(self.alias).filter(status="claimed")
            if sent:
                rows.filter(id__in=list(sent)).update(status="sent", sent_at=now)
            if failed:
                rows.filter(id__in=list(failed)).update(
                    status="failed",
                    error=Case(
                        *[When(id=i, then=Value(error)) for i, error in failed.items()],
                        default=F("error"),
                        output_field=TextField(),
                    ),
                )

    def _release_claims(self, namespace: str, release: Release) -> int:
        from django.db.models import Q  # noqa: PLC0415

        by_attempts: dict[int, list[int]] = {}
        for row_id, attempts in release.attempts.items():
            by_attempts.setdefault(attempts, []).append(row_id)
        this_attempt = Q()
        for attempts, ids in by_attempts.items():
            this_attempt |= Q(id__in=ids, attempts=attempts)
        m = django_models(self.alias)
        with self._write("hand back unsent claims") as connection:
            claimed_at = vendors.clock(connection) - release.age
            return int(
                m.Dispatch.objects.using(self.alias)
                .filter(this_attempt, status="claimed", replica=release.replica)
                .update(claimed_at=claimed_at)
            )

    #: `_heartbeat` applies a delta (`Heartbeat.removed`): beat sends one after a change.
    heartbeat_deltas = True

    def _heartbeat(self, beat: Heartbeat) -> bool:
        m = django_models(self.alias)
        namespace, replica, definitions = beat.namespace, beat.replica, beat.definitions
        with self._write("heartbeat") as connection:
            now = vendors.clock(connection)
            mine = m.Replica.objects.using(self.alias).filter(
                namespace=namespace, replica=replica.id
            )
            if beat.removed is not None:  # read, change, write: one row, in this transaction
                held = mine.select_for_update().values_list("definitions", flat=True).first()
                if held is None:
                    return False
                kept = {k: v for k, v in held.items() if k not in beat.removed}
                merged = {**kept, **(definitions or {})}
                return bool(mine.update(heartbeat_at=now, version=beat.version, definitions=merged))
            if definitions is None:
                return bool(mine.update(heartbeat_at=now))
            updated = mine.update(
                heartbeat_at=now, version=beat.version, definitions=dict(definitions)
            )
            if not updated:
                m.Replica.objects.using(self.alias).bulk_create(
                    [
                        m.Replica(
                            namespace=namespace,
                            started_at=now,
                            heartbeat_at=now,
                            version=beat.version,
                            definitions=dict(definitions),
                            **replica_columns(replica),
                        )
                    ],
                    ignore_conflicts=True,
                )
            return True

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        m = django_models(self.alias)
        with self._boundary("forget a replica"):
            m.Replica.objects.using(self.alias).filter(
                namespace=namespace, replica=replica.id
            ).delete()

    def prune(self, namespace: str, before: datetime, *, budget: timedelta | None = None) -> int:
        m = django_models(self.alias)
        dispatches = m.Dispatch.objects.using(self.alias)

        def delete_batch(batch: int) -> int:
            # The ids first: MySQL/MariaDB take no LIMIT in an IN subquery.
            with self._write("prune"):
                ids = list(
                    dispatches.filter(namespace=namespace, claimed_at__lt=before)
                    .order_by("claimed_at")
                    .values_list("id", flat=True)[:batch]
                )
                deleted, _ = dispatches.filter(id__in=ids).delete()
                return int(deleted)

        deleted = in_batches(delete_batch, budget=budget)
        with self._write("prune") as connection:
            now = vendors.clock(connection)
            m.Replica.objects.using(self.alias).filter(
                namespace=namespace, heartbeat_at__lt=before
            ).delete()
            m.Audit.objects.using(self.alias).filter(namespace=namespace, at__lt=before).delete()
            expired, _ = (
                m.Effect.objects.using(self.alias)
                .filter(namespace=namespace, expires_at__lte=now)
                .delete()
            )
        return int(deleted + expired)


__all__ = ["DjangoOrmStore"]
