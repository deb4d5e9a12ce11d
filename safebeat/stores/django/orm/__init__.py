"""The Django store with ORM queries: MySQL/MariaDB, SQLite, PostgreSQL through psycopg2.

The tick lock fits the vendor (see `safebeat.stores.django.vendors`); the claim is the
same on all of them: every window's row is inserted with `bulk_create(ignore_conflicts=
True)` (`ON CONFLICT DO NOTHING`, MySQL's `INSERT IGNORE`) under the unique key
`(namespace, entry, window_at)`, and the rows this tick inserted are read back by this
replica's id and the tick's instant. A tick costs the same few round trips however many
entries are due. `claim_extra` (windows triggered or backfilled by hand) claims the same
way, without the tick lock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from safebeat.identity import Replica
from safebeat.records import (
    Claim,
    Definition,
    Reclaim,
    Registration,
    TickPlan,
    fence,
    released_age,
)
from safebeat.stores.django import vendors
from safebeat.stores.django.orm.admin import DjangoOrmAdmin
from safebeat.stores.django.orm.executions import DjangoOrmExecutions
from safebeat.stores.django.setup import django_models
from safebeat.stores.sql_common import dispatch_rows, replica_columns
from safebeat.stores.ticking import SteppedTick, TickLockBusy, TickSteps


class DjangoOrmStore(SteppedTick, DjangoOrmExecutions, DjangoOrmAdmin):
    """Implements `safebeat.stores.base.Store` with Django's ORM on one database alias:
    shared reads in `rows.py`, operator reads in `admin.py`, executions and effects in
    `executions.py`, beat's side (register, tick, heartbeat, prune) here."""

    def clock(self) -> datetime:
        with self._boundary("read the clock") as connection:
            return vendors.clock(connection)

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        from django.db.models import Case, F, Q, Value, When  # noqa: PLC0415

        m = django_models(self.alias)
        names = [d.name for d in definitions]
        self._check_lengths(namespace, names)
        with (
            self._boundary("register entries") as connection,
            vendors.write(connection, bound=self._lock_timeout),
        ):
            now = vendors.clock(connection)
            before = dict(
                m.Entry.objects.using(self.alias)
                .filter(namespace=namespace, name__in=names)
                .values_list("name", "digest")
            )
            m.Entry.objects.using(self.alias).bulk_create(
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
                    for d in definitions
                    if d.name not in before
                ],
                ignore_conflicts=True,
            )
            for d in definitions:
                if d.name in before and before[d.name] != d.digest:
                    # Conditional on the stored row, as a concurrent register may have won.
                    m.Entry.objects.using(self.alias).filter(
                        Q(namespace=namespace, name=d.name) & ~Q(digest=d.digest)
                    ).update(
                        # First: MySQL assigns left to right, seeing the new schedule after.
                        defined_at=Case(
                            When(~Q(schedule=d.schedule), then=Value(now)),
                            default=F("defined_at"),
                        ),
                        schedule=d.schedule,
                        digest=d.digest,
                        registered_by=replica.id,
                    )
            states = self._load(namespace, names)
        changed = {
            d.name: before[d.name]
            for d in definitions
            if d.name in before and before[d.name] != d.digest
        }
        return Registration(states, changed)

    @contextmanager
    def _tick_transaction(self, namespace: str, replica: Replica) -> Iterator[TickSteps]:
        try:
            with (
                self._boundary("tick") as connection,
                vendors.tick_transaction(
                    connection,
                    namespace,
                    lock_timeout=self._lock_timeout,
                    sqlite_wait=self._tick_lock_wait,
                ) as now,
            ):
                yield TickSteps(
                    now=now,
                    load=lambda names: self._load(namespace, list(names)),
                    insert=lambda plan: self._insert(namespace, plan, now, replica),
                    advance=lambda advances: self._advance(namespace, advances),
                    reclaim=lambda reclaim: self._reclaim(namespace, reclaim, now, replica),
                )
        except vendors.LockBusy as exc:
            raise TickLockBusy(namespace) from exc

    def _insert(
        self, namespace: str, plan: TickPlan, now: datetime, replica: Replica
    ) -> list[Claim]:
        m = django_models(self.alias)
        if not plan.claims and not plan.skips:
            return []
        # The fence, on the entries' last windows as stored now, their rows locked until
        # the tick commits (the advance that follows writes them anyway).
        planned = {c.entry for c in plan.claims} | {s.entry for s in plan.skips}
        plan = fence(
            plan,
            dict(
                m.Entry.objects.using(self.alias)
                .select_for_update()
                .filter(namespace=namespace, name__in=sorted(planned))
                .values_list("name", "last_window")
            ),
        )
        rows = dispatch_rows(plan)
        if not rows:
            return []
        self._check_lengths(namespace, [row[0] for row in rows])
        who = replica_columns(replica)
        m.Dispatch.objects.using(self.alias).bulk_create(
            [
                m.Dispatch(
                    namespace=namespace,
                    entry=entry,
                    window_at=window,
                    status=status,
                    task_id=task_id,
                    task_name=task_name,
                    reason=reason,
                    skipped_from=first,
                    skipped_count=count,
                    claimed_at=now,
                    **who,
                )
                for entry, window, status, task_id, task_name, reason, first, count in rows
            ],
            ignore_conflicts=True,
            batch_size=1000,
        )
        wanted = {(c.entry, c.window) for c in plan.claims}
        if not wanted:
            return []
        # The rows this tick inserted: this replica's id and this tick's instant. A row that
        # already existed (someone else's claim, or a skip) was left alone and is not ours.
        ours = (
            m.Dispatch.objects.using(self.alias)
            .filter(namespace=namespace, status="claimed", claimed_at=now, replica=replica.id)
            .values_list("id", "entry", "window_at", "task_id")
        )
        return [
            Claim(row_id, entry, window, task_id, 1)
            for row_id, entry, window, task_id in ours
            if (entry, window) in wanted
        ]

    def _advance(self, namespace: str, advances: Mapping[str, datetime]) -> None:
        from django.db.models import Case, DateTimeField, F, Value, When  # noqa: PLC0415
        from django.db.models.functions import Coalesce, Greatest  # noqa: PLC0415

        if not advances:
            return
        m = django_models(self.alias)
        m.Entry.objects.using(self.alias).filter(
            namespace=namespace, name__in=list(advances)
        ).update(
            last_window=Case(
                *[
                    When(
                        name=name,
                        then=Greatest(
                            Coalesce(F("last_window"), Value(window)),
                            Value(window),
                            output_field=DateTimeField(),
                        ),
                    )
                    for name, window in advances.items()
                ],
                default=F("last_window"),
                output_field=DateTimeField(),
            )
        )

    def _reclaim(
        self, namespace: str, reclaim: Reclaim, now: datetime, replica: Replica
    ) -> list[Claim]:
        from django.db import connections  # noqa: PLC0415
        from django.db.models import F, Q  # noqa: PLC0415

        m = django_models(self.alias)
        # Claims left unsent past the timeout, and runs whose lease expired without a
        # finish (see the PostgreSQL store's reclaim_stale).
        unsent = Q(status="claimed", claimed_at__lt=now - reclaim.timeout)
        dead = Q(finished_at__isnull=True, lease_until__lte=now)
        stale_rows = (
            m.Dispatch.objects.using(self.alias)
            .filter(
                unsent | dead,
                namespace=namespace,
                task_id__isnull=False,
                entry__in=list(reclaim.entries),
            )
            .order_by("claimed_at")
        )
        if connections[self.alias].features.has_select_for_update_skip_locked:
            stale_rows = stale_rows.select_for_update(skip_locked=True)
        stale = list(
            stale_rows.values_list("id", "entry", "window_at", "task_id", "attempts")[
                : reclaim.limit
            ]
        )
        if not stale:
            return []
        m.Dispatch.objects.using(self.alias).filter(id__in=[row[0] for row in stale]).update(
            status="claimed",
            lease_until=None,
            claimed_at=now,
            attempts=F("attempts") + 1,
            **replica_columns(replica),
        )
        return [
            Claim(i, entry, window, task_id, attempts + 1)
            for i, entry, window, task_id, attempts in stale
        ]

    def record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        from django.db.models import Case, F, TextField, Value, When  # noqa: PLC0415

        if not sent and not failed:
            return
        m = django_models(self.alias)
        with (
            self._boundary("record publishing") as connection,
            vendors.write(connection, bound=self._lock_timeout),
        ):
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

    def release_claims(
        self,
        namespace: str,
        claims: Sequence[Claim],
        *,
        replica: Replica,
        timeout: timedelta,
    ) -> int:
        from django.db.models import Q  # noqa: PLC0415

        if not claims:
            return 0
        by_attempts: dict[int, list[int]] = {}
        for claim in claims:
            by_attempts.setdefault(claim.attempts, []).append(claim.id)
        this_attempt = Q()
        for attempts, ids in by_attempts.items():
            this_attempt |= Q(id__in=ids, attempts=attempts)
        m = django_models(self.alias)
        with (
            self._boundary("hand back unsent claims") as connection,
            vendors.write(connection, bound=self._lock_timeout),
        ):
            claimed_at = vendors.clock(connection) - released_age(timeout)
            return int(
                m.Dispatch.objects.using(self.alias)
                .filter(this_attempt, status="claimed", replica=replica.id)
                .update(claimed_at=claimed_at)
            )

    def heartbeat(
        self, namespace: str, replica: Replica, version: str, definitions: Mapping[str, str]
    ) -> None:
        m = django_models(self.alias)
        with (
            self._boundary("heartbeat") as connection,
            vendors.write(connection, bound=self._lock_timeout),
        ):
            now = vendors.clock(connection)
            updated = (
                m.Replica.objects.using(self.alias)
                .filter(namespace=namespace, replica=replica.id)
                .update(heartbeat_at=now, version=version, definitions=dict(definitions))
            )
            if not updated:
                m.Replica.objects.using(self.alias).bulk_create(
                    [
                        m.Replica(
                            namespace=namespace,
                            started_at=now,
                            heartbeat_at=now,
                            version=version,
                            definitions=dict(definitions),
                            **replica_columns(replica),
                        )
                    ],
                    ignore_conflicts=True,
                )

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        m = django_models(self.alias)
        with self._boundary("forget a replica"):
            m.Replica.objects.using(self.alias).filter(
                namespace=namespace, replica=replica.id
            ).delete()

    def prune(self, namespace: str, before: datetime) -> int:
        m = django_models(self.alias)
        with (
            self._boundary("prune") as connection,
            vendors.write(connection, bound=self._lock_timeout),
        ):
            now = vendors.clock(connection)
            deleted, _ = (
                m.Dispatch.objects.using(self.alias)
                .filter(namespace=namespace, claimed_at__lt=before)
                .delete()
            )
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
