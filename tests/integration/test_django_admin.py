"""The admin pages, rendered by Django's test client over a store written by real ticks.

The entries page's actions (pause, resume, trigger now) run against safebeat's tables in
SQLite, PostgreSQL and MariaDB (where reachable), and trigger publishes through a real
Celery app to kombu's memory broker.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from safebeat.identity import Replica, format_window, task_id_for
from safebeat.stores.protocols import Definition, NewClaim, Status, TickPlan
from tests import djangosite

pytestmark = pytest.mark.django

REPLICA = Replica("beat-pod-7", 4242, "abcdef")
ENTRIES = "/admin/safebeat/dispatch/entries/"
#: django-celery-beat rows the tests create, deleted after each test.
ROWS = ("broken-args", "nightly-report")


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

    PeriodicTask.objects.filter(name__in=ROWS).delete()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def safebeat_db(request: pytest.FixtureRequest, client: object) -> Iterator[str]:
    """The alias the admin reads safebeat's tables from: `default` (SQLite) or one routed to."""
    if request.param == "sqlite":
        yield "default"
        return
    alias = djangosite.alias_for(request, request.param)
    djangosite.BeatRouter.safebeat = alias
    yield alias
    djangosite.BeatRouter.safebeat = None


@pytest.fixture
def celery_app() -> Iterator[Celery]:
    """The project's Celery app as the admin finds it (the current app), on a memory broker."""
    from celery import current_app

    previous = current_app._get_current_object()
    app = Celery("admintests", broker="memory://")  # becomes the current app
    app.conf.update(
        task_default_queue=f"q-{uuid.uuid4().hex[:8]}",
        result_expires=None,
        beat_scheduler="safebeat.contrib.django.DatabaseScheduler",  # beat runs the rows
        beat_schedule={
            "nightly-report": {
                "task": "billing.charge",
                "schedule": 60.0,
                "kwargs": {"plan": "pro"},
            }
        },
    )

    @app.task(name="billing.charge", shared=False)
    def charge(**kwargs: object) -> None:
        """The task the schedule names."""

    yield app
    previous.set_current()


def settings_definition(app: Celery, name: str = "nightly-report") -> Definition:
    """The definition beat registers for the `beat_schedule` entry `name`."""
    from safebeat.config import config_from_app
    from safebeat.entries import compile_schedule

    entries, _ = compile_schedule(
        app.conf.beat_schedule, app_timezone=app.timezone, config=config_from_app(app)
    )
    return entries[name].definition


def post(client: Any, action: str, *entries: tuple[str, str]) -> str:
    """Run `action` on the entries page for (namespace, name) pairs; return the page after."""
    response = client.post(
        ENTRIES, {"action": action, "entry": [json.dumps(list(e)) for e in entries]}, follow=True
    )
    assert response.status_code == 200
    assert response.redirect_chain == [(ENTRIES, 302)]
    return html.unescape(response.content.decode())


def drain(app: Celery) -> list[tuple[dict[str, Any], Any]]:
    """Every message on the app's queue, as (headers, decoded body)."""
    found = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        while (m := channel.basic_get(app.conf.task_default_queue, no_ack=True)) is not None:
            found.append((m.headers, m.decode()))
    return found


def test_history_entries_and_replicas_pages_show_the_store(client: object, namespace: str) -> None:
    """History filters by entry, the entries page shows state and broken rows, replicas are live.

    The admin reads Celery's current app, here the default one: its beat_scheduler is left
    at Celery's default, so the rows are beat's because Django has django_celery_beat.
    """
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    store.register(namespace, [Definition("nightly-report", "every 60s", "d1")], REPLICA)
    window = store.states(namespace)["nightly-report"].anchor + timedelta(seconds=60)
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


def test_entries_are_paused_resumed_and_triggered_from_the_admin(
    client: Any, safebeat_db: str, celery_app: Celery, namespace: str
) -> None:
    """Pause and resume flip the shared flag; trigger sends one window, recorded as a trigger."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore(f"django://{safebeat_db}")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    key = (namespace, "nightly-report")

    page = post(client, "pause", key)
    assert f"Paused 'nightly-report' (namespace '{namespace}')" in page
    assert '<td class="paused">paused</td>' in page
    assert store.states(namespace)["nightly-report"].paused

    page = post(client, "resume", key)
    assert f"Resumed 'nightly-report' (namespace '{namespace}')" in page
    assert not store.states(namespace)["nightly-report"].paused

    page = post(client, "trigger", key)
    [row] = store.history(namespace, "nightly-report")
    assert (row.status, row.reason, row.task_name) == (Status.SENT, "trigger", "billing.charge")
    window = row.window.isoformat().replace("+00:00", "Z")
    assert f"Triggered 'nightly-report': window {window} sent (task id {row.task_id})" in page
    assert store.states(namespace)["nightly-report"].last_window is None
    [(headers, (args, kwargs, _))] = drain(celery_app)
    assert (headers["id"], headers["safebeat_entry"]) == (row.task_id, "nightly-report")
    assert (args, kwargs) == ([], {"plan": "pro"})


def test_the_next_window_is_skipped_from_the_admin(
    client: Any, safebeat_db: str, celery_app: Celery, namespace: str
) -> None:
    """Skip-next records the next window skipped (reason operator), sends nothing."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore(f"django://{safebeat_db}")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    page = post(client, "skip-next", (namespace, "nightly-report"))
    [row] = store.history(namespace, "nightly-report")
    assert (row.status, row.reason, row.task_id) == (Status.SKIPPED, "operator", None)
    window = row.window.isoformat().replace("+00:00", "Z")
    expected = f"Skipped the next window of 'nightly-report': window {window} is recorded"
    assert expected in page
    assert drain(celery_app) == []


def test_trigger_sends_the_definition_beat_registered(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """Of a periodic task and a beat_schedule entry of one name, the one beat registered is sent."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    from safebeat.config import config_from_app
    from safebeat.contrib.django.source import PeriodicTaskSource, host_now
    from safebeat.stores.django import DjangoStore

    every, _ = IntervalSchedule.objects.get_or_create(every=60, period="seconds")
    PeriodicTask.objects.create(
        name="nightly-report",
        task="billing.charge",
        interval=every,
        kwargs=json.dumps({"plan": "enterprise"}),
    )
    [row] = PeriodicTaskSource(celery_app, config_from_app(celery_app), host_now).load()
    assert row.entry is not None
    store = DjangoStore("django://default")
    key = (namespace, "nightly-report")

    store.register(namespace, [row.entry.definition], REPLICA)
    assert "Triggered 'nightly-report'" in post(client, "trigger", key)
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    assert "Triggered 'nightly-report'" in post(client, "trigger", key)

    sent = [kwargs for _, (_, kwargs, _) in drain(celery_app)]
    assert sent == [{"plan": "enterprise"}, {"plan": "pro"}]
    assert [r.reason for r in store.history(namespace)] == ["trigger", "trigger"]


def test_trigger_says_what_it_could_not_do(client: Any, celery_app: Celery, namespace: str) -> None:
    """An entry the app does not define is refused; a stale definition is sent, with a warning."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    stale = replace(settings_definition(celery_app), digest="an-older-definition")
    store.register(namespace, [stale, Definition("ghost", "every 60s", "d1")], REPLICA)

    page = post(
        client,
        "trigger",
        (namespace, "ghost"),
        (namespace, "nightly-report"),
        (namespace, "not-registered"),
    )
    assert (
        "Could not trigger 'ghost': schedule entry 'ghost': neither the Celery app's "
        "beat_schedule nor an enabled periodic task defines it"
    ) in page
    assert "'nightly-report': the definition compiled here is not the one beat registered" in page
    assert "Triggered 'nightly-report': window " in page
    assert (
        f"Could not trigger 'not-registered': it is not registered in namespace '{namespace}'"
        in (page)
    )
    assert store.history(namespace, "ghost") == []
    assert len(drain(celery_app)) == 1

    page = post(client, "pause")
    assert "Select the entries to act on: no entry was changed." in page
    page = post(client, "resume", (namespace, "not-registered"))
    assert "Could not resume 'not-registered': no entry 'not-registered' is registered" in page


def test_entry_actions_need_the_change_permission(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """A user who may only view the history sees no actions, and a posted one is refused."""
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    viewer, _ = User.objects.get_or_create(username="viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_dispatch"))
    browser = Client()
    browser.force_login(viewer)

    page = browser.get(ENTRIES)
    assert page.status_code == 200
    assert "nightly-report" in page.content.decode()
    assert 'name="action"' not in page.content.decode()
    refused = browser.post(
        ENTRIES,
        {"action": "pause", "entry": json.dumps([namespace, "nightly-report"])},
    )
    assert refused.status_code == 403
    assert not store.states(namespace)["nightly-report"].paused


def test_a_triggered_window_is_committed_before_it_is_published(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """With ATOMIC_REQUESTS on, the claim is committed when its message leaves, as beat's are."""
    import sqlite3
    from contextlib import closing

    from celery.signals import before_task_publish
    from django.db import connections

    from safebeat.stores.django import DjangoStore

    DjangoStore("django://default").register(namespace, [settings_definition(celery_app)], REPLICA)
    database = connections["default"].settings_dict
    seen: list[list[tuple[str]]] = []

    def look(headers: dict[str, Any], **kwargs: object) -> None:
        """Read the window's row from another connection, as a worker would."""
        with closing(sqlite3.connect(str(database["NAME"]))) as other:
            query = "SELECT status FROM safebeat_dispatch WHERE task_id = ?"
            seen.append(other.execute(query, [headers["id"]]).fetchall())

    before_task_publish.connect(look, weak=False)
    database["ATOMIC_REQUESTS"] = True
    try:
        assert "Triggered 'nightly-report'" in post(
            client, "trigger", (namespace, "nightly-report")
        )
    finally:
        database["ATOMIC_REQUESTS"] = False
        before_task_publish.disconnect(look)
    assert seen == [[("claimed",)]]


def test_history_shows_windows_to_the_second_in_utc_and_the_entrys_zone(
    client: Any, safebeat_db: str, namespace: str
) -> None:
    """Three windows 5 s apart read as three times, not one minute thrice; a fraction of a
    second shows; a crontab's window shows in its zone too, an interval's in UTC."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore(f"django://{safebeat_db}")
    definitions = [
        Definition("every-5s", "every 5s", "d1"),
        Definition("moscow-9am", "crontab 0 9 * * * in Europe/Moscow", "d2"),
    ]
    store.register(namespace, definitions, REPLICA)
    start = datetime(2026, 3, 1, 14, 11, tzinfo=timezone.utc)
    windows = {
        "every-5s": [start + timedelta(seconds=s) for s in (0, 5, 10, 12.25)],
        "moscow-9am": [datetime(2026, 3, 1, 6, tzinfo=timezone.utc)],  # 09:00 in Moscow
    }
    claims = [
        NewClaim(name, window, task_id_for(namespace, name, window), "t")
        for name, found in windows.items()
        for window in found
    ]
    result = store.tick(namespace, list(windows), lambda now, s: TickPlan(claims), replica=REPLICA)
    assert result is not None
    assert len(result.claimed) == len(claims)

    page = client.get(f"/admin/safebeat/dispatch/?namespace={namespace}").content.decode()
    rows = re.findall(
        r'<td class="field-window_utc">([^<]*)</td><td class="field-window_in_zone">([^<]*)</td>',
        page,
    )
    assert sorted(rows) == [
        ("2026-03-01 06:00:00 UTC", "2026-03-01 09:00:00 Europe/Moscow (+0300)"),
        ("2026-03-01 14:11:00 UTC", "2026-03-01 14:11:00 UTC"),
        ("2026-03-01 14:11:05 UTC", "2026-03-01 14:11:05 UTC"),
        ("2026-03-01 14:11:10 UTC", "2026-03-01 14:11:10 UTC"),
        ("2026-03-01 14:11:12.25 UTC", "2026-03-01 14:11:12.25 UTC"),
    ]
    assert "Window (UTC)" in page
    assert "Window (entry&#x27;s zone)" in page


# --- the audit trail: who acted from the admin ------------------------------------------


def test_a_pause_with_an_end_and_a_note_is_shown_and_audited_as_the_admin_user(
    client: Any, safebeat_db: str, celery_app: Celery, namespace: str
) -> None:
    """Pausing with "Paused until" and a note keeps both in the store, the entries page says
    "paused until ... (note)", and the audit trail records the admin user, the end, the note."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore(f"django://{safebeat_db}")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    until = (store.clock() + timedelta(hours=2)).replace(microsecond=0)
    response = client.post(
        ENTRIES,
        {
            "action": "pause",
            "entry": [json.dumps([namespace, "nightly-report"])],
            "pause_until": until.isoformat(),
            "pause_note": "card processor down",
        },
        follow=True,
    )
    page = html.unescape(response.content.decode())
    assert f"Paused 'nightly-report' (namespace '{namespace}') until {format_window(until)}" in page
    assert f"paused until {until.isoformat()} (card processor down)</td>" in page
    state = store.states(namespace)["nightly-report"]
    assert (state.paused_until, state.pause_note) == (until, "card processor down")
    [record] = store.audit(namespace)
    assert (record.actor, record.action.value, record.entry, record.windows, record.note) == (
        "ops",
        "pause",
        "nightly-report",
        (until,),
        "card processor down",
    )


def test_the_note_goes_with_a_trigger_and_a_resume_too(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """The page's one Note input is every action's that takes a note (the table of actions
    declares it for pause, resume and trigger): each records it in the audit trail."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    for action in ("trigger", "pause", "resume"):
        response = client.post(
            ENTRIES,
            {
                "action": action,
                "entry": [json.dumps([namespace, "nightly-report"])],
                "pause_note": f"{action}: why",
            },
            follow=True,
        )
        assert response.status_code == 200
    drain(celery_app)
    found = [(r.action.value, r.note) for r in reversed(store.audit(namespace))]
    assert found == [
        ("trigger", "trigger: why"),
        ("pause", "pause: why"),
        ("resume", "resume: why"),
    ]


def test_a_pause_end_in_the_past_is_refused_and_not_audited(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """A "Paused until" already past is refused with the reason; nothing is paused or audited."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    response = client.post(
        ENTRIES,
        {
            "action": "pause",
            "entry": [json.dumps([namespace, "nightly-report"])],
            "pause_until": "2020-01-01T00:00:00Z",
        },
        follow=True,
    )
    assert "is not in the future" in html.unescape(response.content.decode())
    assert not store.states(namespace)["nightly-report"].paused
    assert store.audit(namespace) == []


def test_resume_is_audited_as_the_admin_user(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """Resuming from the admin records a resume by the signed-in user."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    post(client, "pause", (namespace, "nightly-report"))
    post(client, "resume", (namespace, "nightly-report"))
    assert [(r.actor, r.action.value) for r in store.audit(namespace)] == [
        ("ops", "resume"),
        ("ops", "pause"),
    ]


def test_trigger_is_audited_as_the_admin_user_with_its_window(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """Triggering from the admin records a trigger by the user, with the window it sent."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://default")
    store.register(namespace, [settings_definition(celery_app)], REPLICA)
    post(client, "trigger", (namespace, "nightly-report"))
    [row] = store.history(namespace, "nightly-report")
    [record] = store.audit(namespace)
    assert (record.actor, record.action.value, record.windows) == ("ops", "trigger", (row.window,))
    drain(celery_app)


def test_the_audit_page_lists_actions_and_cannot_change_them(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """The admin's "operator actions" page lists the trail read-only: no add, change or
    delete, even for a superuser."""
    from safebeat.stores.django import DjangoStore
    from safebeat.stores.protocols import AuditAction, AuditEvent

    store = DjangoStore("django://default")
    window = datetime(2026, 3, 1, 6, tzinfo=timezone.utc)
    record = store.record_audit(
        namespace,
        AuditEvent("alice@ops-1", AuditAction.BACKFILL, "nightly-report", (window,), "gap"),
    )
    listing = client.get("/admin/safebeat/audit/")
    assert listing.status_code == 200
    text = html.unescape(listing.content.decode())
    for shown in ("alice@ops-1", "backfill", "nightly-report", "2026-03-01 06:00:00 UTC", "gap"):
        assert shown in text, shown
    assert client.get("/admin/safebeat/audit/add/").status_code == 403
    assert client.get(f"/admin/safebeat/audit/{record.id}/delete/").status_code == 403
    change = client.post(f"/admin/safebeat/audit/{record.id}/change/", {"actor": "mallory"})
    assert change.status_code == 403
    assert store.audit(namespace)[0].actor == "alice@ops-1"
