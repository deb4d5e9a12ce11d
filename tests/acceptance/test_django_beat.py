"""Several real `celery beat -S safebeat.contrib.django.DatabaseScheduler` processes reading
django-celery-beat's rows from PostgreSQL, counted on a real Redis broker: each window
once, also after a row is edited while they run."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from safebeat.stores.django import DjangoStore
from tests import djangosite, pgconn, runscope
from tests.acceptance.harness import Cluster, redis_messages, safebeat_messages, verify

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.xdist_group("acceptance"),
    pytest.mark.django,
    pytest.mark.postgres,
]


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("django-acceptance")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


@pytest.fixture
def beat_tables(django_aliases: dict[str, str]) -> Iterator[str]:
    """The PostgreSQL alias with django-celery-beat's tables, emptied after the test."""
    alias = django_aliases["postgres"]
    djangosite.migrate(alias, "django_celery_beat")
    djangosite.BeatRouter.alias = alias
    yield alias
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    PeriodicTask.objects.all().delete()
    IntervalSchedule.objects.all().delete()
    djangosite.BeatRouter.alias = "default"


def database_url(alias: str) -> str:
    from django.db import connections

    return pgconn.from_django(connections[alias].settings_dict)


def test_replicas_send_each_row_window_once_across_an_admin_edit(
    tmp_path: Path, redis_url: str, queue: str, beat_tables: str, namespace: str
) -> None:
    """Three beats on PeriodicTask rows: every window once; an edit mid-run takes effect."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    every_2s = IntervalSchedule.objects.create(every=2, period="seconds")
    PeriodicTask.objects.create(name="steady", task="billing.charge", interval=every_2s)
    edited = PeriodicTask.objects.create(name="edited", task="billing.charge", interval=every_2s)
    beats = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule={},
        app="tests.acceptance.djangobeat",
        env={
            "SB_DATABASE_URL": database_url(beat_tables),
            "SAFEBEAT_NAMESPACE": namespace,
            "SAFEBEAT_CLAIM_TIMEOUT": "2",
            "SAFEBEAT_LOCK_TIMEOUT": "1",
        },
    )
    store = DjangoStore(f"django://{beat_tables}")
    beats.start(3, scheduler="safebeat.contrib.django.DatabaseScheduler")
    try:
        beats.wait_started()
        time.sleep(5)
        edited.interval = IntervalSchedule.objects.create(every=1, period="seconds")
        edited.save()  # what the admin's save button does
        edited_at = store.clock()
        time.sleep(6)
        end = store.clock()
    finally:
        beats.stop()
    messages = safebeat_messages(redis_messages(redis_url, queue))
    copies = Counter((m.entry, m.window) for m in messages)
    assert copies, f"nothing was sent\n{beats.logs()}"
    assert set(copies.values()) == {1}, f"windows sent twice: {copies}\n{beats.logs()}"
    steady = verify(
        store,
        namespace,
        {"steady": 2.0},
        [m for m in messages if m.entry == "steady"],
        end - timedelta(seconds=1),
    )
    steady.assert_exactly_once(beats.logs())
    after = sorted(m.window for m in messages if m.entry == "edited" and m.window > edited_at)
    # The first windows after the save may still be on the old grid (a beat looks at the
    # change marker once a second); from then on, the new interval.
    gaps = {b - a for a, b in itertools.pairwise(after[2:])}
    assert gaps == {timedelta(seconds=1)}, f"edited row still on its old schedule: {after}"
    # Each sent window was written back to its row (a beat stopped between its publish and
    # its write-back may owe one).
    sent = sum(1 for m in messages if m.entry == "steady")
    assert sent - 3 <= PeriodicTask.objects.get(name="steady").total_run_count <= sent
