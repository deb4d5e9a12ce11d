"""The ORM store's tick steps: its transaction with the vendor's tick lock, then load,
insert (fenced, `bulk_create(ignore_conflicts=True)` under the unique key), advance and
take over, which `ticking.SteppedTick` runs in order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime

from safebeat.identity import Replica
from safebeat.record_rules import fence, take_over_page
from safebeat.records import Claim, Reclaim, ReclaimPage, StaleClaim, TickPlan
from safebeat.stores.django import vendors
from safebeat.stores.django.orm.rows import DjangoOrmRows
from safebeat.stores.django.setup import django_models
from safebeat.stores.sql_common import dispatch_rows, replica_columns
from safebeat.stores.ticking import SteppedTick, TickLockBusy, TickSteps


class DjangoOrmTick(SteppedTick, DjangoOrmRows):
    """`TickStore.tick` with Django's ORM: the steps of `ticking.SteppedTick`."""

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
        # One branch per distinct window, not per entry: a burst advances thousands of
        # entries to the same few windows.
        by_window: dict[datetime, list[str]] = {}
        for name, window in advances.items():
            by_window.setdefault(window, []).append(name)
        m.Entry.objects.using(self.alias).filter(
            namespace=namespace, name__in=list(advances)
        ).update(
            last_window=Case(
                *[
                    When(
                        name__in=names,
                        then=Greatest(
                            Coalesce(F("last_window"), Value(window)),
                            Value(window),
                            output_field=DateTimeField(),
                        ),
                    )
                    for window, names in by_window.items()
                ],
                default=F("last_window"),
                output_field=DateTimeField(),
            )
        )

    def _reclaim(
        self, namespace: str, reclaim: Reclaim, now: datetime, replica: Replica
    ) -> tuple[list[Claim], ReclaimPage]:
        from django.db.models import F  # noqa: PLC0415

        # Claims left unsent past the timeout, and runs whose lease expired without a
        # finish (see the PostgreSQL store's stale_claims), of every entry, a page of them
        # after `reclaim.after`: each kind through its index (of unsent claims, of running
        # rows), at most a page each, then the first page of both.
        found = sorted(
            {row[0]: row for row in self._stale_rows(namespace, reclaim, now)}.values(),
            key=lambda row: (row[5], row[0]),
        )[: reclaim.page]
        ids, page = take_over_page(reclaim, [StaleClaim(r[0], r[1], r[5]) for r in found])
        if not ids:
            return [], page
        m = django_models(self.alias)
        m.Dispatch.objects.using(self.alias).filter(id__in=ids).update(
            status="claimed",
            lease_until=None,
            claimed_at=now,
            attempts=F("attempts") + 1,
            **replica_columns(replica),
        )
        chosen = set(ids)
        return [
            Claim(i, entry, window, task_id, attempts + 1)
            for i, entry, window, task_id, attempts, _ in found
            if i in chosen
        ], page

    def _stale_rows(
        self, namespace: str, reclaim: Reclaim, now: datetime
    ) -> list[tuple[int, str, datetime, str, int, datetime]]:
        """Up to a page of unsent claims and a page of dead runs after `reclaim.after`,
        (id, entry, window, task id, attempts, claimed_at) each, locked for this tick
        (skipping rows another transaction holds) where the database can."""
        from django.db import connections  # noqa: PLC0415
        from django.db.models import Q  # noqa: PLC0415

        m = django_models(self.alias)
        after = Q()
        if reclaim.after is not None:
            at, row_id = reclaim.after.claimed_at, reclaim.after.id
            after = Q(claimed_at__gte=at) & (Q(claimed_at__gt=at) | Q(id__gt=row_id))
        # Unsent past the timeout while its run is not alive (record_rules.unsent_and_stale).
        alive = Q(started_at__isnull=False, finished_at__isnull=True, lease_until__gt=now)
        kinds = (
            Q(status="claimed", claimed_at__lt=now - reclaim.timeout) & ~alive,
            Q(started_at__isnull=False, finished_at__isnull=True, lease_until__lte=now),
        )
        skip_locked = connections[self.alias].features.has_select_for_update_skip_locked
        columns = ("id", "entry", "window_at", "task_id", "attempts", "claimed_at")
        rows: list[tuple[int, str, datetime, str, int, datetime]] = []
        for kind in kinds:
            stale = (
                m.Dispatch.objects.using(self.alias)
                .filter(kind, after, namespace=namespace, task_id__isnull=False)
                .order_by("claimed_at", "id")
            )
            if skip_locked:
                stale = stale.select_for_update(skip_locked=True)
            rows.extend(stale.values_list(*columns)[: reclaim.page])
        return rows
