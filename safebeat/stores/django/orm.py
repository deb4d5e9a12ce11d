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

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from safebeat.errors import StoreError
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
    TickResult,
    decide_start,
    states_after,
)
from safebeat.stores.django import vendors
from safebeat.stores.django.base import DjangoStore
from safebeat.stores.django.setup import django_models
from safebeat.stores.sql_common import dispatch_rows, replica_columns


class DjangoOrmStore(DjangoStore):
    """Implements `safebeat.stores.base.Store` with Django's ORM on one database alias."""

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
        with self._boundary("register entries") as connection, vendors.write(connection):
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

    def states(self, namespace: str) -> dict[str, EntryState]:
        with self._boundary("load entry states"):
            return self._load(namespace, None)

    def _load(self, namespace: str, names: Collection[str] | None) -> dict[str, EntryState]:
        from django.db.models import OuterRef, Subquery  # noqa: PLC0415

        m = django_models(self.alias)
        running = (
            m.Dispatch.objects.using(self.alias)
            .filter(
                namespace=OuterRef("namespace"),
                entry=OuterRef("name"),
                started_at__isnull=False,
                finished_at__isnull=True,
            )
            .order_by("-started_at")
            .values("started_at")[:1]
        )
        rows = m.Entry.objects.using(self.alias).filter(namespace=namespace)
        if names is not None:
            rows = rows.filter(name__in=list(names))
        states: dict[str, EntryState] = {}
        for values in rows.annotate(running_since=Subquery(running)).values_list(*STATE_COLUMNS):
            state = dict(zip(STATE_COLUMNS, values, strict=True))
            states[state["name"]] = EntryState(**{**state, "paused": bool(state["paused"])})
        return states

    def tick(
        self,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        names = list(names)
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
                states = self._load(namespace, names)
                plan = planner(now, states)
                claimed = self._insert(namespace, plan, now, replica)
                self._advance(namespace, plan.advances)
                reclaimed = (
                    [] if reclaim is None else self._reclaim(namespace, reclaim, now, replica)
                )
        except vendors.LockBusy:
            return None
        return TickResult(now, states_after(states, plan), claimed, reclaimed, plan)

    def _insert(self, namespace: str, plan: Any, now: datetime, replica: Replica) -> list[Claim]:
        m = django_models(self.alias)
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
        from django.db.models import F  # noqa: PLC0415

        m = django_models(self.alias)
        stale_rows = (
            m.Dispatch.objects.using(self.alias)
            .filter(
                namespace=namespace,
                status="claimed",
                claimed_at__lt=now - reclaim.timeout,
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
            claimed_at=now, attempts=F("attempts") + 1, **replica_columns(replica)
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
        with self._boundary("record publishing") as connection, vendors.write(connection):
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

    def heartbeat(
        self, namespace: str, replica: Replica, version: str, definitions: Mapping[str, str]
    ) -> None:
        m = django_models(self.alias)
        with self._boundary("heartbeat") as connection, vendors.write(connection):
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

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        m = django_models(self.alias)
        with self._boundary("list replicas"):
            rows = list(
                m.Replica.objects.using(self.alias)
                .filter(namespace=namespace)
                .order_by("-heartbeat_at")
                .values_list(
                    "replica", "host", "pid", "version", "started_at", "heartbeat_at", "definitions"
                )
            )
        return [ReplicaRecord(*row) for row in rows]

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        m = django_models(self.alias)
        with self._boundary("forget a replica"):
            m.Replica.objects.using(self.alias).filter(
                namespace=namespace, replica=replica.id
            ).delete()

    def namespaces(self) -> list[str]:
        m = django_models(self.alias)
        with self._boundary("list namespaces"):
            found = m.Entry.objects.using(self.alias).order_by().values_list("namespace", flat=True)
            return sorted({str(name) for name in found.distinct()})

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        m = django_models(self.alias)
        with self._boundary("read history"):
            rows = m.Dispatch.objects.using(self.alias).filter(namespace=namespace)
            if entry is not None:
                rows = rows.filter(entry=entry)
            values = list(rows.order_by("-window_at", "-id").values_list(*HISTORY_COLUMNS)[:limit])
        return [_record(row) for row in values]

    def set_paused(self, namespace: str, entry: str, paused: bool) -> bool:
        action = "pause an entry" if paused else "resume an entry"
        m = django_models(self.alias)
        with self._boundary(action) as connection, vendors.write(connection):
            # MySQL counts the rows matched, not changed (Django connects with FOUND_ROWS).
            updated = (
                m.Entry.objects.using(self.alias)
                .filter(namespace=namespace, name=entry)
                .update(paused=paused)
            )
        return bool(updated)

    def claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], *, replica: Replica, reason: str
    ) -> list[Claim]:
        if not claims:
            return []
        m = django_models(self.alias)
        self._check_lengths(namespace, [c.entry for c in claims])
        who = replica_columns(replica)
        with self._boundary("claim windows") as connection, vendors.write(connection):
            now = vendors.clock(connection)
            dispatches = m.Dispatch.objects.using(self.alias)
            dispatches.bulk_create(
                [
                    m.Dispatch(
                        namespace=namespace,
                        entry=c.entry,
                        window_at=c.window,
                        status="claimed",
                        task_id=c.task_id,
                        task_name=c.task_name,
                        reason=reason,
                        claimed_at=now,
                        **who,
                    )
                    for c in claims
                ],
                ignore_conflicts=True,
                batch_size=1000,
            )
            # The rows this call inserted, as a tick reads its own back: this replica's id
            # and this call's instant. A window that had a row keeps it and is not returned.
            ours = {
                (entry, window): (row_id, task_id)
                for row_id, entry, window, task_id in dispatches.filter(
                    namespace=namespace,
                    status="claimed",
                    claimed_at=now,
                    replica=replica.id,
                    reason=reason,
                    entry__in=sorted({c.entry for c in claims}),
                ).values_list("id", "entry", "window_at", "task_id")
            }
        inserted: list[Claim] = []
        for c in claims:
            found = ours.pop((c.entry, c.window), None)
            if found is not None:
                inserted.append(Claim(found[0], c.entry, c.window, found[1], 1))
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
        from django.db.models import F  # noqa: PLC0415

        m = django_models(self.alias)
        with (
            self._boundary("record the start of an execution") as connection,
            vendors.write(connection),
        ):
            rows = m.Dispatch.objects.using(self.alias)
            found = (
                rows.select_for_update()
                .filter(namespace=namespace, entry=entry, window_at=window, task_id__isnull=False)
                .values_list("id", "started_at", "finished_at", "retries")
                .first()
            )
            if found is None:
                return Start.UNKNOWN
            row_id, started_at, finished_at, recorded_retries = found
            now = vendors.clock(connection)
            verdict = decide_start(
                started_at=started_at,
                finished_at=finished_at,
                recorded_retries=recorded_retries,
                retries=retries,
                now=now,
                stale_after=stale_after,
            )
            if verdict is Start.DUPLICATE:
                rows.filter(id=row_id).update(duplicates=F("duplicates") + 1)
                return Start.DUPLICATE
            rows.filter(id=row_id).update(
                started_at=now,
                worker=worker,
                retries=retries,
                finished_at=None,
                outcome=None,
                runtime=None,
                runs=F("runs") + 1,
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
        m = django_models(self.alias)
        changes: dict[str, object] = {}
        if detail is not None:
            changes["error"] = detail
        with (
            self._boundary("record the end of an execution") as connection,
            vendors.write(connection),
        ):
            now = vendors.clock(connection)
            m.Dispatch.objects.using(self.alias).filter(
                namespace=namespace,
                entry=entry,
                window_at=window,
                worker=worker,
                retries=retries,
                finished_at__isnull=True,
            ).update(finished_at=now, outcome=outcome.value, runtime=runtime, **changes)

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        m = django_models(self.alias)
        with self._boundary("claim an effect key") as connection:
            if connection.vendor == "mysql" and len(key) > m.EFFECT_KEY_LENGTH:
                raise StoreError(
                    f"Django store {self.display_url}: effect key of {len(key)} characters; "
                    f"MySQL/MariaDB hold at most {m.EFFECT_KEY_LENGTH}: use a shorter key"
                )
            with vendors.write(connection):
                now = vendors.clock(connection)
                effects = m.Effect.objects.using(self.alias)
                record = {"owner": owner, "task_id": task_id, "claimed_at": now}
                record["expires_at"] = now + keep_for
                # An expired key is taken over (a row lock straight away, never an upgrade
                # of a shared one, so concurrent claims queue instead of deadlocking)...
                taken = effects.filter(namespace=namespace, key=key, expires_at__lte=now).update(
                    **record
                )
                if taken:
                    return True
                # ...a new one inserted; a live one (someone else's) wins silently.
                effects.bulk_create(
                    [m.Effect(namespace=namespace, key=key, **record)], ignore_conflicts=True
                )
                mine = effects.filter(namespace=namespace, key=key, owner=owner, claimed_at=now)
                return bool(mine.exists())

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        m = django_models(self.alias)
        with self._boundary("release an effect key") as connection, vendors.write(connection):
            deleted, _ = (
                m.Effect.objects.using(self.alias)
                .filter(namespace=namespace, key=key, owner=owner)
                .delete()
            )
        return bool(deleted > 0)

    def prune(self, namespace: str, before: datetime) -> int:
        m = django_models(self.alias)
        with self._boundary("prune") as connection, vendors.write(connection):
            now = vendors.clock(connection)
            deleted, _ = (
                m.Dispatch.objects.using(self.alias)
                .filter(namespace=namespace, claimed_at__lt=before)
                .delete()
            )
            m.Replica.objects.using(self.alias).filter(
                namespace=namespace, heartbeat_at__lt=before
            ).delete()
            expired, _ = (
                m.Effect.objects.using(self.alias)
                .filter(namespace=namespace, expires_at__lte=now)
                .delete()
            )
        return int(deleted + expired)

    def _check_lengths(self, namespace: str, names: Sequence[str]) -> None:
        """MySQL keys are bounded varchars, and INSERT IGNORE would truncate: refuse instead."""
        from django.db import connections  # noqa: PLC0415

        if connections[self.alias].vendor != "mysql":
            return
        m = django_models(self.alias)
        if len(namespace) > m.NAMESPACE_LENGTH:
            raise StoreError(
                f"Django store {self.display_url}: namespace {namespace[:40]!r}... is longer "
                f"than {m.NAMESPACE_LENGTH} characters, the most MySQL/MariaDB hold"
            )
        for name in names:
            if len(name) > m.ENTRY_LENGTH:
                raise StoreError(
                    f"Django store {self.display_url}: entry {name[:40]!r}... is longer than "
                    f"{m.ENTRY_LENGTH} characters, the most MySQL/MariaDB hold; rename it"
                )


#: The values of an EntryState, in its order (`running_since` is computed).
STATE_COLUMNS = (
    "name",
    "anchor",
    "defined_at",
    "last_window",
    "digest",
    "schedule",
    "running_since",
    "paused",
)
HISTORY_COLUMNS = (
    "id",
    "entry",
    "window_at",
    "status",
    "task_id",
    "task_name",
    "reason",
    "skipped_from",
    "skipped_count",
    "replica",
    "host",
    "pid",
    "claimed_at",
    "sent_at",
    "attempts",
    "error",
    "started_at",
    "finished_at",
    "outcome",
    "runtime",
    "worker",
    "retries",
    "runs",
    "duplicates",
)


def _record(row: Sequence[Any]) -> DispatchRecord:
    values = dict(zip(HISTORY_COLUMNS, row, strict=True))
    values["window"] = values.pop("window_at")
    values["status"] = Status(values["status"])
    if values["outcome"] is not None:
        values["outcome"] = Outcome(values["outcome"])
    return DispatchRecord(**values)
