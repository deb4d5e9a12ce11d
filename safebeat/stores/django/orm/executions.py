"""The ORM store's execution records and effect keys (the worker hook, `safebeat.claim`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

from safebeat.errors import StoreError
from safebeat.records import LeasedRun, RunEnd
from safebeat.stores.django import vendors
from safebeat.stores.django.orm.rows import DjangoOrmRows
from safebeat.stores.django.setup import django_models
from safebeat.stores.executions import DecidedStart, ExecutionRow, outcome_of, start_columns


class DjangoOrmExecutions(DecidedStart, DjangoOrmRows):
    """`ExecutionStore` and `EffectStore` with Django's ORM."""

    @contextmanager
    def _execution_row(
        self, namespace: str, run: LeasedRun, *, exclusive: bool
    ) -> Iterator[ExecutionRow | None]:
        from django.db.models import F  # noqa: PLC0415

        m = django_models(self.alias)
        with self._write("record the start of an execution") as connection:
            rows = m.Dispatch.objects.using(self.alias)
            if exclusive:
                # Starts of one forbid entry queue on its entry row, so two windows
                # starting at once each see the other's start.
                list(
                    m.Entry.objects.using(self.alias)
                    .select_for_update()
                    .filter(namespace=namespace, name=run.entry)
                    .values_list("name")
                )
            found = (
                rows.select_for_update()
                .filter(
                    namespace=namespace,
                    entry=run.entry,
                    window_at=run.window,
                    task_id__isnull=False,
                )
                .values_list("id", "started_at", "finished_at", "outcome", "lease_until", "retries")
                .first()
            )
            if found is None:
                yield None
                return
            row_id, started_at, finished_at, outcome, lease_until, recorded_retries = found
            now = vendors.clock(connection)
            other_run_alive = (
                exclusive
                and rows.filter(
                    namespace=namespace,
                    entry=run.entry,
                    started_at__isnull=False,
                    finished_at__isnull=True,
                    lease_until__gt=now,
                )
                .exclude(window_at=run.window)
                .exists()
            )
            yield ExecutionRow(
                now,
                started_at,
                finished_at,
                outcome_of(outcome),
                lease_until,
                recorded_retries,
                other_run_alive,
                start=lambda lease_until: rows.filter(id=row_id).update(
                    **start_columns(run, now, lease_until), runs=F("runs") + 1
                ),
                duplicate=lambda: rows.filter(id=row_id).update(duplicates=F("duplicates") + 1),
            )

    def _renew_executions(self, namespace: str, runs: Sequence[LeasedRun], lease: timedelta) -> int:
        m = django_models(self.alias)
        with (
            self._boundary("renew execution leases") as connection,
            vendors.write(connection),
        ):
            lease_until = vendors.clock(connection) + lease
            rows = m.Dispatch.objects.using(self.alias)
            return sum(
                rows.filter(**_held_by(namespace, run)).update(lease_until=lease_until)
                for run in runs
            )

    def finish_execution(self, namespace: str, run: LeasedRun, end: RunEnd) -> None:
        m = django_models(self.alias)
        changes: dict[str, object] = {"outcome": end.outcome.value, "runtime": end.runtime}
        if end.detail is not None:
            changes["error"] = end.detail
        with self._write("record the end of an execution") as connection:
            now = vendors.clock(connection)
            m.Dispatch.objects.using(self.alias).filter(**_held_by(namespace, run)).update(
                finished_at=now, **changes
            )

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
            with vendors.write(connection, bound=self._lock_timeout):
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
        with self._write("release an effect key"):
            deleted, _ = (
                m.Effect.objects.using(self.alias)
                .filter(namespace=namespace, key=key, owner=owner)
                .delete()
            )
        return bool(deleted > 0)


def _held_by(namespace: str, run: LeasedRun) -> dict[str, object]:
    """The filter of `run`'s row while it still holds it (`LeasedRun.holds`)."""
    return {
        "namespace": namespace,
        "entry": run.entry,
        "window_at": run.window,
        "worker": run.worker,
        "retries": run.retries,
        "finished_at__isnull": True,
    }
