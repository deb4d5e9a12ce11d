"""The admin's backfill: a form for one entry's range, a preview of its windows, then the
windows without a row sent through a real Celery app, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import html
import json
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from celery import Celery

from safebeat.identity import format_window, task_id_for
from safebeat.stores.protocols import NewClaim, Status
from tests.integration.test_django_admin import ENTRIES, REPLICA, drain, settings_definition

pytestmark = pytest.mark.django

BACKFILL = "/admin/safebeat/dispatch/entries/backfill/"


def iso(instant: datetime) -> str:
    return format_window(instant)


def registered(alias: str, app: Celery, namespace: str) -> tuple[Any, datetime]:
    """The `django://alias` store with `nightly-report` (every 60 s) registered; its anchor."""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore(f"django://{alias}")
    store.register(namespace, [settings_definition(app)], REPLICA)
    return store, store.states(namespace)["nightly-report"].anchor


def page(response: Any) -> str:
    return html.unescape(response.content.decode())


def test_backfill_previews_the_windows_then_sends_only_those_without_a_row(
    client: Any, safebeat_db: str, celery_app: Celery, namespace: str
) -> None:
    """The action opens the form; Preview lists 5 windows and claims none; Send sends the 4 new."""
    store, anchor = registered(safebeat_db, celery_app, namespace)
    start, end = anchor - timedelta(minutes=5), anchor - timedelta(seconds=1)
    taken = anchor - timedelta(minutes=3)
    [_] = store.claim_extra(
        namespace,
        [NewClaim("nightly-report", taken, task_id_for(namespace, "nightly-report", taken), "t")],
        replica=REPLICA,
        reason="backfill",
    )

    opened = client.post(
        ENTRIES,
        {"action": "backfill", "entry": [json.dumps([namespace, "nightly-report"])]},
        follow=True,
    )
    query = urlencode({"namespace": namespace, "entry": "nightly-report"})
    assert opened.redirect_chain == [(f"{BACKFILL}?{query}", 302)]
    assert "Backfill nightly-report" in page(opened)

    form = {"namespace": namespace, "entry": "nightly-report", "start": iso(start), "end": iso(end)}
    preview = client.post(BACKFILL, {**form, "preview": "Preview"})
    assert preview.status_code == 200
    text = page(preview)
    assert "5 windows in the range: 4 would be sent." in text
    for minutes in (5, 4, 2, 1):
        window = iso(anchor - timedelta(minutes=minutes))
        assert f"<td>{window}</td>\n      <td>none: would be sent</td>" in text
    assert f"<td>{iso(taken)}</td>\n      <td>already claimed: left alone</td>" in text
    assert 'value="Send 4 windows"' in text
    assert len(store.history(namespace, "nightly-report")) == 1  # the preview claimed nothing
    assert drain(celery_app) == []

    sent = client.post(BACKFILL, {**form, "send": "Send 4 windows"}, follow=True)
    assert sent.redirect_chain == [(ENTRIES, 302)]
    first, last = iso(anchor - timedelta(minutes=5)), iso(anchor - timedelta(minutes=1))
    assert f"Backfilled 'nightly-report': 4 windows sent, {first} to {last}" in page(sent)
    assert "Backfilled 'nightly-report': 1 window already had a row; left alone" in page(sent)
    rows = [r for r in store.history(namespace, "nightly-report") if r.window != taken]
    assert {(r.status, r.reason) for r in rows} == {(Status.SENT, "backfill")}
    messages = drain(celery_app)
    assert sorted(h["safebeat_window"] for h, _ in messages) == sorted(iso(r.window) for r in rows)
    assert len(messages) == 4


@pytest.mark.parametrize(
    ("span", "said"),
    [
        ((-60, -300), "The range ends before it starts: swap From and To."),
        ((-300, 3600), "Could not backfill 'nightly-report': --to "),
        ((-30, -10), "Could not backfill 'nightly-report': entry 'nightly-report' has no window"),
    ],
    ids=["reversed", "future", "empty"],
)
def test_backfill_says_why_it_refuses_a_range_and_claims_nothing(
    client: Any, celery_app: Celery, namespace: str, span: tuple[int, int], said: str
) -> None:
    """A reversed range is a form error; one reaching the future or holding no window is
    refused with the reason; either way nothing is claimed or sent."""
    store, anchor = registered("default", celery_app, namespace)
    start, end = span
    form = {
        "namespace": namespace,
        "entry": "nightly-report",
        "start": iso(anchor + timedelta(seconds=start)),
        "end": iso(anchor + timedelta(seconds=end)),
    }
    for button in ("preview", "send"):
        response = client.post(BACKFILL, {**form, button: "1"}, follow=True)
        assert response.status_code == 200
        assert said in page(response)
    assert store.history(namespace, "nightly-report") == []
    assert drain(celery_app) == []


def test_backfill_action_takes_one_entry_and_the_change_permission(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """Two selected entries are refused with a message; a viewer may not open the form."""
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    registered("default", celery_app, namespace)
    two = [json.dumps([namespace, "nightly-report"]), json.dumps([namespace, "other"])]
    response = client.post(ENTRIES, {"action": "backfill", "entry": two}, follow=True)
    assert response.redirect_chain == [(ENTRIES, 302)]
    assert "Select one entry to backfill." in page(response)

    viewer, _ = User.objects.get_or_create(username="backfill-viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_dispatch"))
    browser = Client()
    browser.force_login(viewer)
    assert browser.get(f"{BACKFILL}?namespace={namespace}&entry=nightly-report").status_code == 403


def test_backfill_is_audited_as_the_admin_user_with_the_windows_it_sent(
    client: Any, celery_app: Celery, namespace: str
) -> None:
    """Sending a backfill records who sent it and its windows; its preview records nothing."""
    store, anchor = registered("default", celery_app, namespace)
    start, end = anchor - timedelta(minutes=2), anchor - timedelta(seconds=1)
    form = {"namespace": namespace, "entry": "nightly-report", "start": iso(start), "end": iso(end)}
    client.post(BACKFILL, {**form, "preview": "Preview"})
    assert store.audit(namespace) == []
    client.post(BACKFILL, {**form, "send": "Send 2 windows"}, follow=True)
    [record] = store.audit(namespace)
    assert (record.actor, record.action.value, record.entry) == (
        "ops",
        "backfill",
        "nightly-report",
    )
    assert record.windows == (anchor - timedelta(minutes=2), anchor - timedelta(minutes=1))
    drain(celery_app)
