"""The admin pages, rendered by Django's test client over a store written by real ticks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from safebeat.identity import Replica, task_id_for
from safebeat.stores.base import Definition, NewClaim, TickPlan
from tests import djangosite

pytestmark = pytest.mark.django

REPLICA = Replica("beat-pod-7", 4242, "abcdef")


@pytest.fixture
def client(django_aliases: dict[str, str]) -> Iterator[object]:
    """A test client logged in as a superuser, on a default database with every app migrated."""
    djangosite.migrate("default")
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="ops", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    yield client
    from django_celery_beat.models import PeriodicTask

    PeriodicTask.objects.filter(name="broken-args").delete()


def test_history_entries_and_replicas_pages_show_the_store(client: object, namespace: str) -> None:
    """History filters by entry, the entries page shows state and broken rows, replicas are live."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    state = store.register(namespace, [Definition("nightly-report", "every 60s", "d1")], REPLICA)
    window = state.states["nightly-report"].anchor + timedelta(seconds=60)
    claim = NewClaim(
        "nightly-report", window, task_id_for(namespace, "nightly-report", window), "t"
    )
    result = store.tick(
        namespace, ["nightly-report"], lambda now, s: TickPlan([claim]), replica=REPLICA
    )
    assert result is not None
    store.record_publish(namespace, [c.id for c in result.claimed], {})
    store.heartbeat(namespace, REPLICA, "0.1.0", {"nightly-report": "d1"})
    every, _ = IntervalSchedule.objects.get_or_create(every=60, period="seconds")
    PeriodicTask.objects.create(
        name="broken-args", task="celery.backend_cleanup", interval=every, args="[1,"
    )

    history = client.get(f"/admin/safebeat/dispatch/?entry=nightly-report&namespace={namespace}")  # type: ignore[attr-defined]
    assert history.status_code == 200
    assert "1 dispatch" in history.content.decode()
    assert '<td class="field-status">sent</td>' in history.content.decode()

    entries = client.get("/admin/safebeat/dispatch/entries/")  # type: ignore[attr-defined]
    assert entries.status_code == 200
    page = entries.content.decode()
    assert "nightly-report" in page
    assert "<strong>broken-args</strong>: args is not valid JSON" in page

    replicas = client.get("/admin/safebeat/dispatch/replicas/")  # type: ignore[attr-defined]
    assert replicas.status_code == 200
    assert "<td>live</td>\n      <td>" + namespace + "</td>\n      <td>beat-pod-7</td>" in (
        replicas.content.decode()
    )

    row = result.claimed[0]
    assert client.get(f"/admin/safebeat/dispatch/{row.id}/delete/").status_code == 403  # type: ignore[attr-defined]
