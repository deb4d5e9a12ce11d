"""The web console (safebeat.web) through Starlette's test client, on stores filled by a
real scheduler that published to a real Redis broker."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import pytest
import redis
from celery import Celery
from click.testing import CliRunner, Result
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import safebeat.web
from safebeat import Scheduler
from safebeat.cli import main
from safebeat.identity import Replica, current_replica, format_window
from safebeat.limits import NOTE_CHARS
from safebeat.stores import Store, open_store
from safebeat.stores.protocols import AuditAction, AuditEvent, Definition
from safebeat.testing import FakeClock
from safebeat.web import Credentials
from tests.acceptance.harness import redis_messages, safebeat_messages
from tests.integration.beat import make_app, tick_until

ENTRY = "every-1s"
PAGES = ("/", f"/entries/{ENTRY}", "/replicas", "/doctor")
FORM = "application/x-www-form-urlencoded"
#: Where the tests' browser finds the console: a loopback name, as `safebeat web` serves.
LOCAL_HOST = "127.0.0.1:8765"


def local(app: Any, **options: Any) -> TestClient:
    """A test client of `app` that asks for it by a loopback name, as a browser on the
    console's machine does (Starlette's default, `testserver`, is answered by no console)."""
    return TestClient(app, base_url=f"http://{LOCAL_HOST}", **options)


@dataclass
class Filled:
    """A store that a real scheduler filled, the Celery app it ran, and its broker queue."""

    app: Celery
    url: str
    namespace: str
    queue: str
    store: Store
    broker_url: str

    def messages(self) -> list[Any]:
        return safebeat_messages(redis_messages(self.broker_url, self.queue))


def with_password(url: str) -> str:
    """`url` with a password in it (PostgreSQL trust auth ignores one it does not need)."""
    parts = urlsplit(url)
    if parts.password:
        return url
    user = parts.username or "postgres"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:hunter2@{host}"))


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def filled(
    request: pytest.FixtureRequest,
    redis_url: str,
    sqlite_url: str,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Filled]:
    """A store beat filled with two sent windows (its replica still heartbeating), per backend."""
    # Not a Django project: where another test configured Django in this process, the
    # console would otherwise read django-celery-beat's rows too (it cannot see beat's -S).
    monkeypatch.setattr("safebeat.entries.app_entries.periodic_tasks_reason", lambda app: None)
    url = {"sqlite": sqlite_url, "redis": redis_url}.get(request.param, "")
    if request.param == "postgres":
        url = with_password(request.getfixturevalue("pg_url"))
    queue = f"web-{namespace}"
    app = make_app(redis_url, queue, url, namespace)
    clock = FakeClock()
    scheduler = Scheduler(app, monotonic=clock.monotonic)
    tick_until(scheduler, clock, lambda: scheduler.metrics.totals.dispatched >= 2)
    store = open_store(url)
    yield Filled(app, url, namespace, queue, store, redis_url)
    store.close()
    scheduler.close()
    redis.Redis.from_url(redis_url).delete(queue)


@pytest.fixture
def client(filled: Filled) -> Iterator[TestClient]:
    with local(safebeat.web.app(filled.app)) as test_client:
        yield test_client


def csrf_token(client: TestClient, path: str = f"/entries/{ENTRY}") -> str:
    """The CSRF token of the console's forms, as a browser gets it from the entry's page."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).text)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def test_every_page_shows_what_beat_recorded(client: TestClient, filled: Filled) -> None:
    """Entries, an entry's history, replicas and the doctor answer 200 with the store's facts."""
    entries = client.get("/")
    assert entries.status_code == 200
    assert f'data-entry="{ENTRY}"' in entries.text
    assert "every second" in entries.text  # the schedule in words
    assert "<code>every 1s</code>" in entries.text  # and as text
    history = client.get(f"/entries/{ENTRY}")
    assert history.status_code == 200
    [newest, *_] = filled.store.history(filled.namespace, ENTRY)
    assert format_window(newest.window) in history.text
    assert current_replica().id in history.text
    assert '<svg class="strip"' in history.text
    assert '<svg class="lag"' in history.text
    replicas = client.get("/replicas")
    assert replicas.status_code == 200
    assert current_replica().id in replicas.text
    assert ">live<" in replicas.text
    doctor = client.get("/doctor")
    assert doctor.status_code == 200
    assert "store" in doctor.text
    assert client.get("/static/console.css").status_code == 200


def test_an_unknown_entry_is_404_naming_it(client: TestClient) -> None:
    """The page of an entry the namespace lacks is 404 and says which."""
    response = client.get("/entries/no-such-entry")
    assert response.status_code == 404
    assert "no entry &#39;no-such-entry&#39; is registered" in response.text


@pytest.mark.postgres
def test_no_page_shows_the_store_password(pg_url: str, namespace: str) -> None:
    """Every page names the store without its password, reachable or not."""
    url = with_password(pg_url)
    secret = urlsplit(url).password
    assert secret
    store = open_store(url)
    store.register(namespace, [Definition(ENTRY, "every 1s", "d")], Replica("host-a", 1, "aa"))
    store.heartbeat(namespace, Replica("host-a", 1, "aa"), "1.0", {ENTRY: "d"})
    store.close()
    down = with_password(f"postgresql://postgres@127.0.0.1:1/{namespace}")
    for console, status in ((url, 200), (down, 503)):
        with local(safebeat.web.app(url=console, namespace=namespace)) as test_client:
            for path in PAGES:
                page = test_client.get(path)
                # The doctor reports an unreachable store as its finding.
                assert page.status_code == (200 if path == "/doctor" else status), path
                assert secret not in page.text, path
                assert "***" in page.text, path


def test_pause_then_resume_flags_the_entry_in_the_store(client: TestClient, filled: Filled) -> None:
    """Pause and resume are POSTs that set and clear the store's flag, then show the entry;
    a page served through a proxy that ends TLS may pause too."""
    token = csrf_token(client)
    # The browser says https where a proxy ending TLS talks http to the console: same host.
    origin = {"Origin": f"https://{LOCAL_HOST}"}
    paused = client.post(f"/entries/{ENTRY}/pause", data={"csrf_token": token}, headers=origin)
    assert paused.status_code == 200
    assert paused.url.path == f"/entries/{ENTRY}"
    assert "Paused: every replica skips its windows" in paused.text
    assert filled.store.states(filled.namespace)[ENTRY].paused
    assert 'id="resume"' in paused.text
    assert client.get("/").text.count('class="badge paused"') == 1
    resumed = client.post(f"/entries/{ENTRY}/resume", data={"csrf_token": token})
    assert resumed.status_code == 200
    assert not filled.store.states(filled.namespace)[ENTRY].paused


def test_an_action_without_its_csrf_token_is_refused(client: TestClient, filled: Filled) -> None:
    """A POST with no token, another browser's token, or from another origin changes nothing."""
    token = csrf_token(client)
    missing = client.post(f"/entries/{ENTRY}/pause", data={})
    assert missing.status_code == 403
    assert "CSRF token" in missing.text
    forged = client.post(f"/entries/{ENTRY}/pause", data={"csrf_token": "0" * 64})
    assert forged.status_code == 403
    elsewhere = client.post(
        f"/entries/{ENTRY}/pause",
        data={"csrf_token": token},
        headers={"Origin": "https://evil.example"},
    )
    assert elsewhere.status_code == 403
    assert "another site" in elsewhere.text
    other_browser = local(safebeat.web.app(filled.app))
    stolen = other_browser.post(f"/entries/{ENTRY}/pause", data={"csrf_token": token})
    assert stolen.status_code == 403
    assert not filled.store.states(filled.namespace)[ENTRY].paused


def test_read_only_shows_no_action_and_refuses_every_post(filled: Filled) -> None:
    """With read_only, pages have no forms and every action is 403, changing nothing."""
    with local(safebeat.web.app(filled.app, read_only=True)) as test_client:
        page = test_client.get(f"/entries/{ENTRY}")
        assert page.status_code == 200
        assert "<form" not in page.text
        assert "read-only" in page.text
        for action in ("pause", "resume", "trigger", "backfill"):
            response = test_client.post(f"/entries/{ENTRY}/{action}", data={})
            assert response.status_code == 403, action
            assert "read-only" in response.text
    assert not filled.store.states(filled.namespace)[ENTRY].paused
    assert not [r for r in filled.store.history(filled.namespace, ENTRY) if r.reason]


def test_trigger_publishes_one_run_recorded_as_a_trigger(
    client: TestClient, filled: Filled
) -> None:
    """Trigger now sends the task once, with a `trigger` row and the message's task id."""
    before = {m.task_id for m in filled.messages()}
    response = client.post(f"/entries/{ENTRY}/trigger", data={"csrf_token": csrf_token(client)})
    assert response.status_code == 200
    assert "sent (task id" in response.text
    [row] = [r for r in filled.store.history(filled.namespace, ENTRY) if r.reason == "trigger"]
    assert row.task_id in response.text
    [message] = [m for m in filled.messages() if m.task_id not in before]
    assert message.task_id == row.task_id


def test_backfill_previews_its_windows_then_sends_only_those(
    client: TestClient, filled: Filled
) -> None:
    """Backfill first lists the range's windows and claims nothing; confirming sends them once."""
    anchor = filled.store.states(filled.namespace)[ENTRY].anchor
    start = format_window(anchor - timedelta(seconds=5))
    end = format_window(anchor - timedelta(seconds=1))
    token = csrf_token(client)
    form = {"csrf_token": token, "start": start, "end": end}
    preview = client.post(f"/entries/{ENTRY}/backfill", data=form)
    assert preview.status_code == 200
    listed = re.findall(r'<li><time datetime="([^"]+)"', preview.text)
    assert len(listed) == 5
    assert listed[0] == start
    assert not [r for r in filled.store.history(filled.namespace, ENTRY) if r.reason]
    sent = client.post(f"/entries/{ENTRY}/backfill", data={**form, "confirm": "yes"})
    assert sent.status_code == 200
    rows = [r for r in filled.store.history(filled.namespace, ENTRY) if r.reason == "backfill"]
    assert sorted(format_window(r.window) for r in rows) == listed
    assert sent.text.count(" sent (task id") == 5
    again = client.post(f"/entries/{ENTRY}/backfill", data={**form, "confirm": "yes"})
    assert "5 windows already had a row" in again.text
    assert len([m for m in filled.messages() if start <= format_window(m.window) <= end]) == 5


def test_backfill_refuses_the_future_and_a_time_without_a_zone(client: TestClient) -> None:
    """A range ending in the future, or an instant without zone, is 400 with the reason."""
    token = csrf_token(client)
    future = client.post(
        f"/entries/{ENTRY}/backfill",
        data={"csrf_token": token, "start": "2026-01-01T00:00:00Z", "end": "2999-01-01T00:00Z"},
    )
    assert future.status_code == 400
    assert "is in the future" in future.text
    naive = client.post(
        f"/entries/{ENTRY}/backfill",
        data={"csrf_token": token, "start": "2026-01-01T00:00", "end": "2026-01-01T01:00Z"},
    )
    assert naive.status_code == 400
    assert "has no time zone" in naive.text


def test_without_the_app_trigger_says_it_needs_one(filled: Filled) -> None:
    """Opened on a store URL alone, the console shows and pauses but cannot publish."""
    console = safebeat.web.app(url=filled.url, namespace=filled.namespace)
    with local(console) as test_client:
        page = test_client.get(f"/entries/{ENTRY}")
        assert page.status_code == 200
        assert "start the console with -A" in page.text
        token = csrf_token(test_client)
        refused = test_client.post(f"/entries/{ENTRY}/trigger", data={"csrf_token": token})
        assert refused.status_code == 400
        assert "start the console with -A" in refused.text
        paused = test_client.post(f"/entries/{ENTRY}/pause", data={"csrf_token": token})
        assert paused.status_code == 200
    assert filled.store.states(filled.namespace)[ENTRY].paused


def test_mounted_under_a_prefix_its_links_and_actions_stay_there(filled: Filled) -> None:
    """Mounted at /safebeat in a host app, every link and form points under /safebeat."""
    host = Starlette(routes=[Mount("/safebeat", safebeat.web.app(filled.app))])
    with local(host) as test_client:
        entries = test_client.get("/safebeat/")
        assert entries.status_code == 200
        links = re.findall(r'(?:href|action)="([^"]+)"', entries.text)
        assert links
        assert all(link.startswith("/safebeat/") for link in links), links
        token = csrf_token(test_client, f"/safebeat/entries/{ENTRY}")
        paused = test_client.post(f"/safebeat/entries/{ENTRY}/pause", data={"csrf_token": token})
        assert paused.url.path == f"/safebeat/entries/{ENTRY}"
    assert filled.store.states(filled.namespace)[ENTRY].paused


def test_configured_credentials_are_required_of_every_request(filled: Filled) -> None:
    """With a token or a user and password, a request without them is 401 with a prompt."""
    token_app = safebeat.web.app(filled.app, credentials=Credentials(token="s3cret-token"))
    with local(token_app) as test_client:
        refused = test_client.get("/")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Basic")
        assert test_client.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        bearer = {"Authorization": "Bearer s3cret-token"}
        assert test_client.get("/", headers=bearer).status_code == 200
        assert test_client.get("/", auth=("anyone", "s3cret-token")).status_code == 200
        assert test_client.post(f"/entries/{ENTRY}/pause").status_code == 401
    basic_app = safebeat.web.app(
        filled.app, credentials=Credentials(username="ops", password="pw-1")
    )
    with local(basic_app) as test_client:
        assert test_client.get("/", auth=("ops", "pw-2")).status_code == 401
        assert test_client.get("/", auth=("ops", "pw-1")).status_code == 200


def test_standalone_refuses_a_public_address_without_credentials(sqlite_url: str) -> None:
    """`safebeat web --bind 0.0.0.0:...` without a token or user exits 2 and says what to give."""
    result = CliRunner().invoke(main, ["--url", sqlite_url, "web", "--bind", "0.0.0.0:8765"])
    assert result.exit_code == 2
    assert "--token" in result.output
    assert "bind 127.0.0.1" in result.output
    half = CliRunner().invoke(
        main, ["--url", sqlite_url, "web", "--bind", "0.0.0.0:8765", "--user", "ops"]
    )
    assert half.exit_code == 2
    assert "needs both a user name and a password" in half.output


def test_an_empty_namespace_names_the_ones_the_store_holds(filled: Filled) -> None:
    """A namespace without entries says so and lists the store's namespaces, as status
    does, the one its name was a typo of first (a shared store holds many)."""
    typo = filled.namespace[:-1]
    console = safebeat.web.app(url=filled.url, namespace=typo)
    with local(console) as test_client:
        page = test_client.get("/")
    assert page.status_code == 200
    assert f"namespace &#39;{typo}&#39; has no registered entries" in page.text
    assert f"holds &#39;{filled.namespace}&#39;" in page.text


# --- the audit trail: who acted from the console ----------------------------------------


@pytest.fixture
def signed_in(filled: Filled) -> Iterator[TestClient]:
    """A console behind basic auth, with the operator `ops` signed in."""
    console = safebeat.web.app(filled.app, credentials=Credentials(username="ops", password="pw"))
    basic = base64.b64encode(b"ops:pw").decode()
    with local(console, headers={"Authorization": f"Basic {basic}"}) as test_client:
        yield test_client


def test_pause_until_with_a_note_is_shown_and_audited_as_the_signed_in_user(
    signed_in: TestClient, filled: Filled
) -> None:
    """Pausing with an end and a note keeps both in the store, the pages show the end and
    the note and mark the next window as skipped, and the audit trail records the
    basic-auth user, the end and the note."""
    until = (filled.store.clock() + timedelta(hours=1)).replace(microsecond=0)
    form = {"csrf_token": csrf_token(signed_in), "until": format_window(until), "note": "db move"}
    paused = signed_in.post(f"/entries/{ENTRY}/pause", data=form)
    assert paused.status_code == 200
    assert "until the pause ends" in paused.text
    shown_until = f'until <time datetime="{format_window(until)}"'
    assert re.search(rf'id="pause">Paused {shown_until}.*?</time>: db move</p>', paused.text)
    assert 'id="next-skipped"' in paused.text
    entries = signed_in.get("/").text
    assert shown_until in entries
    assert "db move" in entries
    assert "will be skipped (paused)" in entries
    state = filled.store.states(filled.namespace)[ENTRY]
    assert (state.paused_until, state.pause_note) == (until, "db move")
    [record] = filled.store.audit(filled.namespace)
    assert (record.actor, record.action.value, record.entry, record.windows, record.note) == (
        "ops",
        "pause",
        ENTRY,
        (until,),
        "db move",
    )


def test_a_pause_end_that_is_not_an_instant_is_refused(
    signed_in: TestClient, filled: Filled
) -> None:
    """An `until` without a zone is 400 with the reason, on the entry's page with what was
    typed still in the form (the note is not lost), and the entry stays unpaused."""
    form = {"csrf_token": csrf_token(signed_in), "until": "2030-01-01T00:00", "note": "db move"}
    refused = signed_in.post(f"/entries/{ENTRY}/pause", data=form)
    assert refused.status_code == 400
    assert "has no time zone" in refused.text
    assert 'name="until" value="2030-01-01T00:00"' in refused.text
    assert f'name="note" maxlength="{NOTE_CHARS}" value="db move"' in refused.text
    assert not filled.store.states(filled.namespace)[ENTRY].paused
    assert filled.store.audit(filled.namespace) == []


def test_each_note_input_takes_the_notes_the_actions_take(signed_in: TestClient) -> None:
    """The console's note inputs let an operator type as long a note as the table of
    actions (and the admin's forms, and the CLI) accepts, no shorter."""
    page = signed_in.get(f"/entries/{ENTRY}").text
    lengths = re.findall(r'name="note" maxlength="(\d+)"', page)
    assert lengths
    assert set(lengths) == {str(NOTE_CHARS)}


def test_resume_is_audited_as_the_signed_in_user(signed_in: TestClient, filled: Filled) -> None:
    """Resuming from the console records a resume by the basic-auth user."""
    token = csrf_token(signed_in)
    signed_in.post(f"/entries/{ENTRY}/pause", data={"csrf_token": token})
    assert signed_in.post(f"/entries/{ENTRY}/resume", data={"csrf_token": token}).status_code == 200
    resumed, paused = filled.store.audit(filled.namespace)
    assert [(r.actor, r.action.value) for r in (resumed, paused)] == [
        ("ops", "resume"),
        ("ops", "pause"),
    ]


def test_trigger_is_audited_with_its_window(signed_in: TestClient, filled: Filled) -> None:
    """Triggering from the console records a trigger by the user, with the window sent."""
    signed_in.post(f"/entries/{ENTRY}/trigger", data={"csrf_token": csrf_token(signed_in)})
    [row] = [r for r in filled.store.history(filled.namespace, ENTRY) if r.reason == "trigger"]
    [record] = filled.store.audit(filled.namespace)
    assert (record.actor, record.action.value, record.windows) == ("ops", "trigger", (row.window,))


def test_skip_next_records_the_next_window_skipped_and_audits_it(
    signed_in: TestClient, filled: Filled
) -> None:
    """Skipping from the console: the next window is a skipped row (reason operator), sent
    by no one, and the audit names the user, the window and the note."""
    form = {"csrf_token": csrf_token(signed_in), "note": "holiday"}
    page = html.unescape(signed_in.post(f"/entries/{ENTRY}/skip-next", data=form).text)
    [row] = [r for r in filled.store.history(filled.namespace, ENTRY) if r.reason == "operator"]
    # It says which window: the one the page showed may have been claimed first.
    assert f"window {format_window(row.window)} is recorded as skipped" in page
    assert (row.status.value, row.task_id) == ("skipped", None)
    entry_page = signed_in.get(f"/entries/{ENTRY}").text
    [skipped] = re.findall(r'<tr class="s-skipped">(.*?)</tr>', entry_page, re.DOTALL)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", skipped, re.DOTALL)
    assert (cells[1], cells[4]) == ("skipped", "-")  # never published: no attempts
    [record] = filled.store.audit(filled.namespace)
    assert (record.actor, record.action, record.windows, record.note) == (
        "ops",
        AuditAction.SKIP,
        (row.window,),
        "holiday",
    )


def test_backfill_is_audited_with_its_windows_and_its_preview_is_not(
    signed_in: TestClient, filled: Filled
) -> None:
    """A backfill's preview records nothing; confirming records the windows it claimed."""
    anchor = filled.store.states(filled.namespace)[ENTRY].anchor
    start, end = anchor - timedelta(seconds=3), anchor - timedelta(seconds=1)
    form = {"csrf_token": csrf_token(signed_in), "start": format_window(start)}
    form["end"] = format_window(end)
    signed_in.post(f"/entries/{ENTRY}/backfill", data=form)
    assert filled.store.audit(filled.namespace) == []
    signed_in.post(f"/entries/{ENTRY}/backfill", data={**form, "confirm": "yes"})
    [record] = filled.store.audit(filled.namespace)
    assert (record.actor, record.action.value) == ("ops", "backfill")
    assert record.windows == (start, start + timedelta(seconds=1), end)


def test_the_audit_page_lists_actions_newest_first_and_by_entry(
    signed_in: TestClient, filled: Filled
) -> None:
    """The audit page shows who did what, newest first; `?entry=` keeps one entry's."""
    filled.store.record_audit(
        filled.namespace, AuditEvent("alice@ops-1", AuditAction.PRUNE, note="before then")
    )
    signed_in.post(f"/entries/{ENTRY}/pause", data={"csrf_token": csrf_token(signed_in)})
    page = signed_in.get("/audit")
    assert page.status_code == 200
    rows = re.findall(
        r'<tr class="a-(\w+)">\s*<td><time .*?</time></td><td>([^<]+)</td>', page.text
    )
    assert rows == [("pause", "ops"), ("prune", "alice@ops-1")]
    one = signed_in.get("/audit", params={"entry": ENTRY})
    assert re.findall(r'<tr class="a-(\w+)">', one.text) == ["pause"]
    assert f'href="/audit?entry={ENTRY}"' in signed_in.get(f"/entries/{ENTRY}").text


def test_mounted_behind_the_host_apps_auth_the_host_user_is_the_actor(filled: Filled) -> None:
    """Mounted behind Starlette's AuthenticationMiddleware, actions are recorded under the
    host app's signed-in user."""
    from starlette.authentication import (
        AuthCredentials,
        AuthenticationBackend,
        SimpleUser,
    )
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.requests import HTTPConnection

    class Everyone(AuthenticationBackend):
        async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser]:
            return AuthCredentials(["authenticated"]), SimpleUser("dana")

    host = Starlette(
        routes=[Mount("/safebeat", safebeat.web.app(filled.app))],
        middleware=[Middleware(AuthenticationMiddleware, backend=Everyone())],
    )
    with local(host) as test_client:
        token = csrf_token(test_client, f"/safebeat/entries/{ENTRY}")
        test_client.post(f"/safebeat/entries/{ENTRY}/pause", data={"csrf_token": token})
    [record] = filled.store.audit(filled.namespace)
    assert (record.actor, record.action.value) == ("dana", "pause")


# --- safe to expose ---------------------------------------------------------------------

VICTIM = "victim"
#: Names whose unencoded paths would act on `victim`, or on no entry at all.
TRICKY = ("x/../victim", "victim?x=1", "victim#top", "50%off", "x/pause")
NAMES = (VICTIM, *TRICKY)


@pytest.fixture
def tricky(
    redis_url: str, sqlite_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Filled]:
    """A SQLite store where beat registered `victim` and the tricky names (hourly, so no
    window comes due during a test), and the Celery app defining them."""
    monkeypatch.setattr("safebeat.entries.app_entries.periodic_tasks_reason", lambda app: None)
    queue = f"web-{namespace}"
    schedule = {name: {"task": "faults.tick", "schedule": 3600.0} for name in (VICTIM, *TRICKY)}
    app = make_app(redis_url, queue, sqlite_url, namespace, beat_schedule=schedule)
    scheduler = Scheduler(app, monotonic=FakeClock().monotonic)
    scheduler.tick()
    store = open_store(sqlite_url)
    yield Filled(app, sqlite_url, namespace, queue, store, redis_url)
    store.close()
    scheduler.close()
    redis.Redis.from_url(redis_url).delete(queue)


def actions_of(page: str) -> dict[str, str]:
    """The path each form of a page posts to, by the action's last word."""
    return {path.rpartition("/")[2]: path for path in re.findall(r'action="([^"]+)"', page)}


def test_a_foreign_host_is_refused_and_changes_nothing(filled: Filled) -> None:
    """DNS rebinding: a page of evil.example, a name that resolves to 127.0.0.1, asks the
    console for its pages and POSTs a pause with its own Host and Origin: each gets 400,
    nothing is paused, and the console's own page still works."""
    with local(safebeat.web.app(filled.app)) as test_client:
        token = csrf_token(test_client)
        evil = {"Host": "evil.example:8765", "Origin": "http://evil.example:8765"}
        for path in PAGES:
            page = test_client.get(path, headers=evil)
            assert page.status_code == 400, path
            assert "csrf_token" not in page.text
            assert "--allowed-host" in page.text
        paused = test_client.post(
            f"/entries/{ENTRY}/pause", data={"csrf_token": token}, headers=evil
        )
        assert paused.status_code == 400
        assert test_client.get("/", headers={"Host": "localhost:8765"}).status_code == 200
        assert test_client.get("/", headers={"Host": "[::1]"}).status_code == 200
    assert not filled.store.states(filled.namespace)[ENTRY].paused
    assert filled.store.audit(filled.namespace) == []


def test_an_origin_is_checked_against_the_allowed_hosts_not_the_requests_host(
    filled: Filled,
) -> None:
    """Behind a proxy named ops.example.com (`allowed_hosts`), a POST from that origin
    pauses, whether the proxy passes the Host on or not; one whose Origin is another
    site is refused, even with a Host that matches it."""
    console = safebeat.web.app(filled.app, allowed_hosts=["ops.example.com"])
    with local(console) as test_client:
        token = csrf_token(test_client)
        pause = f"/entries/{ENTRY}/pause"
        for host in ("ops.example.com", LOCAL_HOST):
            headers = {"Host": host, "Origin": "https://ops.example.com"}
            assert test_client.post(pause, data={"csrf_token": token}, headers=headers).is_success
            assert filled.store.states(filled.namespace)[ENTRY].paused
            test_client.post(f"/entries/{ENTRY}/resume", data={"csrf_token": token})
        forged = {"Host": LOCAL_HOST, "Origin": f"http://{LOCAL_HOST}.evil.example"}
        refused = test_client.post(pause, data={"csrf_token": token}, headers=forged)
        assert refused.status_code == 403
        assert test_client.get("/", headers={"Host": "other.example.com"}).status_code == 400
    assert not filled.store.states(filled.namespace)[ENTRY].paused


def test_every_response_forbids_framing_sniffing_and_foreign_referrers(filled: Filled) -> None:
    """Pages, errors, refusals, the login prompt and the stylesheet all carry
    X-Frame-Options DENY, a CSP with frame-ancestors 'none', nosniff and a same-origin
    Referrer-Policy."""
    open_console = local(safebeat.web.app(filled.app))
    guarded = local(safebeat.web.app(filled.app, credentials=Credentials(token="t0ken")))
    responses = [
        open_console.get("/"),
        open_console.get(f"/entries/{ENTRY}"),
        open_console.get("/entries/no-such-entry"),
        open_console.get("/static/console.css"),
        open_console.post(f"/entries/{ENTRY}/pause", data={}),
        open_console.get("/", headers={"Host": "evil.example"}),
        guarded.get("/"),
    ]
    assert [r.status_code for r in responses] == [200, 200, 404, 200, 403, 400, 401]
    for response in responses:
        headers = response.headers
        assert headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "same-origin"


def test_a_name_with_path_characters_links_to_and_acts_on_itself(tricky: Filled) -> None:
    """Entries named `x/../victim`, `victim?x=1`, `victim#top`, `50%off` and `x/pause`:
    each link opens that entry's page, and its pause, resume, trigger and backfill forms
    act on that entry alone, never on `victim`."""
    store, namespace = tricky.store, tricky.namespace

    def sent(name: str) -> int:
        """How many windows of `name` were sent by hand (trigger)."""
        return len([r for r in store.history(namespace, name) if r.reason])

    anchor = store.states(namespace)[VICTIM].anchor
    span = {"start": format_window(anchor - timedelta(hours=2)), "end": format_window(anchor)}
    with local(safebeat.web.app(tricky.app)) as test_client:
        entries = test_client.get("/").text
        links = dict(re.findall(r'<a href="([^"]+)">([^<]+)</a></td>', entries))
        assert sorted(links.values()) == sorted(html.escape(n) for n in (VICTIM, *TRICKY))
        for path, shown in links.items():
            name = html.unescape(shown)
            before = {n: sent(n) for n in NAMES}
            page = test_client.get(path)
            assert page.status_code == 200, name
            assert f"<h1>{shown}" in page.text, name
            token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
            assert token
            actions = actions_of(page.text)
            paused = test_client.post(actions["pause"], data={"csrf_token": token.group(1)})
            assert paused.url.raw_path.decode().partition("?")[0] == path, name
            states = store.states(namespace)
            assert [n for n, s in states.items() if s.paused] == [name]
            resumed = test_client.post(
                actions_of(paused.text)["resume"], data={"csrf_token": token.group(1)}
            )
            assert resumed.status_code == 200
            triggered = test_client.post(actions["trigger"], data={"csrf_token": token.group(1)})
            assert f"Triggered {shown}" in triggered.text, name
            preview = test_client.post(
                actions["backfill"], data={"csrf_token": token.group(1), **span}
            )
            assert f"Backfill {shown}:" in preview.text, name
            assert [n for n in NAMES if sent(n) != before[n]] == [name]
    assert not any(s.paused for s in store.states(namespace).values())
    assert sorted(r.entry for r in store.audit(namespace) if r.action.value == "pause") == sorted(
        (VICTIM, *TRICKY)
    )


@pytest.mark.parametrize("name", ["\n", "a\nb", "x/\r\n/y"])
def test_an_action_on_a_name_with_a_line_break_is_refused_naming_the_entry(
    filled: Filled, name: str
) -> None:
    """A name holding a line break reaches the console's page (no bare "Not Found"), which
    refuses it as a name no entry may have, naming the entry; nothing changes."""
    with local(safebeat.web.app(filled.app)) as test_client:
        form = {"csrf_token": csrf_token(test_client)}
        for action in ("pause", "trigger"):
            refused = test_client.post(f"/entries/{quote(name, safe='')}/{action}", data=form)
            assert refused.status_code == 400, (action, refused.text)
            assert "entry" in refused.text, (action, refused.text)
    assert not any(s.paused for s in filled.store.states(filled.namespace).values())
    assert filled.store.audit(filled.namespace) == []


def test_the_actor_is_only_ever_what_the_credentials_proved(filled: Filled) -> None:
    """A basic-auth name the console did not check is ignored: an open console records
    `web <client>`, a token console its token's actor (any user name beside the token),
    a user-and-password console that user."""
    forged = {"Authorization": "Basic " + base64.b64encode(b"mallory:x").decode()}
    token = Credentials(token="t0ken", token_actor="deploy-bot")
    consoles = [
        (Credentials(), forged, "web testclient"),
        (token, {"Authorization": "Bearer t0ken"}, "deploy-bot"),
        (token, {"Authorization": "Basic " + base64.b64encode(b"mallory:t0ken").decode()},
         "deploy-bot"),
        (Credentials(token="t0ken"), {"Authorization": "Bearer t0ken"}, "token"),
        (Credentials(username="ops", password="pw"),
         {"Authorization": "Basic " + base64.b64encode(b"ops:pw").decode()}, "ops"),
    ]  # fmt: skip
    for credentials, headers, actor in consoles:
        console = safebeat.web.app(filled.app, credentials=credentials)
        with local(console, headers=headers) as test_client:
            test_client.post(
                f"/entries/{ENTRY}/pause", data={"csrf_token": csrf_token(test_client)}
            )
        [record, *_] = filled.store.audit(filled.namespace)
        assert record.actor == actor, credentials


@pytest.mark.parametrize(
    "credentials",
    [{"token": ""}, {"token": "  "}, {"username": "", "password": "x"},
     {"username": "ops", "password": ""}, {"token": "t", "token_actor": ""}],
)  # fmt: skip
def test_an_empty_credential_is_refused_not_taken_for_none(credentials: dict[str, str]) -> None:
    """An empty token, user name or password is a ValueError that says so, never a console
    that lets every request in."""
    with pytest.raises(ValueError, match="is empty"):
        safebeat.web.app(url="memory://", credentials=Credentials(**credentials))


def web_command(sqlite_url: str, *args: str) -> Result:
    """`safebeat web ARGS` on `sqlite_url`; expected to stop before serving."""
    return CliRunner().invoke(main, ["--url", sqlite_url, "web", *args])


def refused_in_one_line(result: Result, said: str) -> None:
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--allowed-host", "*"], "DNS rebinding"),
        (["--allowed-host", "https://ops.example.com"], "give a host name"),
        (["--allowed-host", "ops.example.com:99999"], "give a host name"),
    ],
)
def test_safebeat_web_refuses_a_bad_allowed_host_in_one_line(
    sqlite_url: str, args: list[str], said: str
) -> None:
    """`--allowed-host *` without credentials (it would answer a rebinding page), a URL
    for a host, or a port beyond 65535 exits 2 with one line naming it."""
    refused_in_one_line(web_command(sqlite_url, *args), said)


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--token", ""], {}, "the token"),
        (["--user", "", "--password", "x"], {}, "the user name"),
        (["--user", "ops", "--password", ""], {}, "the password"),
        ([], {"SAFEBEAT_WEB_TOKEN": ""}, "SAFEBEAT_WEB_TOKEN set but empty"),
        (["--user", "ops"], {"SAFEBEAT_WEB_PASSWORD": ""}, "SAFEBEAT_WEB_PASSWORD set but empty"),
    ],
)
def test_safebeat_web_refuses_an_empty_credential_in_one_line(
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    said: str,
) -> None:
    """An empty token, user name or password, as a flag or a variable set to nothing,
    exits 2 with one line naming it, before serving a console without it."""
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    refused_in_one_line(web_command(sqlite_url, *args), said)


@pytest.mark.parametrize("port", ["99999", "0", "65536"])
def test_safebeat_web_refuses_a_port_that_is_no_tcp_port_in_one_line(
    sqlite_url: str, port: str
) -> None:
    """`--bind 127.0.0.1:99999` exits 2 with one line naming the port, not a traceback."""
    result = web_command(sqlite_url, "--bind", f"127.0.0.1:{port}")
    refused_in_one_line(result, f"port {port} is not a TCP port")


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (urlencode({"csrf_token": "é" * 64}), FORM),
        (urlencode({"csrf_token": "\u2028<script>"}), FORM),
        ("csrf_token=%ff%fe%ed%a0%80", FORM),  # not UTF-8, a surrogate's bytes among them
        (b"csrf_token=\xff\xfe", FORM),  # raw bytes beyond ASCII
        ("csrf_token=" + "0" * 16_000, FORM),
        ("csrf_token=%00", FORM),
        ("csrf_token=", FORM),
        ("csrf_token=+", FORM),
        ("csrf_token&csrf_token=x", FORM),
        ('--b\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\nx\r\n--b--\r\n',
         "multipart/form-data; boundary=b"),
    ],
    ids=["non-ascii", "line-separator", "invalid-utf8", "raw-bytes", "huge", "nul", "empty",
         "space", "no-value", "multipart"],
)  # fmt: skip
def test_any_csrf_token_is_refused_with_403_never_a_500(
    filled: Filled, body: str | bytes, content_type: str
) -> None:
    """Whatever the form's csrf_token holds (beyond ASCII, not UTF-8, 16,000 characters,
    nothing), or however the form is sent, a POST without the right token is 403 and
    changes nothing."""
    with local(safebeat.web.app(filled.app)) as test_client:
        csrf_token(test_client)  # the browser has its cookie
        refused = test_client.post(
            f"/entries/{ENTRY}/pause", content=body, headers={"Content-Type": content_type}
        )
    assert refused.status_code == 403
    assert not filled.store.states(filled.namespace)[ENTRY].paused


@pytest.mark.parametrize(
    ("field", "size", "status"),
    [("note", NOTE_CHARS + 1, 400), ("until", 65, 400), ("start", 65, 400), ("note", 20_000, 413)],
)
def test_a_field_over_its_limit_is_refused_and_changes_nothing(
    filled: Filled, field: str, size: int, status: int
) -> None:
    """A pause note over the notes' limit (1,000 characters), an instant over 64, is 400
    naming the field and its limit; a form over 16 KiB is 413. Nothing is paused or audited."""
    with local(safebeat.web.app(filled.app)) as test_client:
        form = {"csrf_token": csrf_token(test_client), field: "x" * size}
        action = "backfill" if field == "start" else "pause"
        refused = test_client.post(f"/entries/{ENTRY}/{action}", data=form)
    assert refused.status_code == status
    if status == 400:
        assert f"the {field} is {size:,} characters long" in refused.text
        assert "at most" in refused.text
    assert not filled.store.states(filled.namespace)[ENTRY].paused
    assert filled.store.audit(filled.namespace) == []


def test_a_note_at_its_limit_is_kept_whole(filled: Filled) -> None:
    """A pause note of exactly the notes' limit (1,000 characters) pauses with it."""
    with local(safebeat.web.app(filled.app)) as test_client:
        form = {"csrf_token": csrf_token(test_client), "note": "n" * NOTE_CHARS}
        assert test_client.post(f"/entries/{ENTRY}/pause", data=form).status_code == 200
    assert filled.store.states(filled.namespace)[ENTRY].pause_note == "n" * NOTE_CHARS


def test_trigger_and_backfill_keep_their_notes_in_the_audit(
    signed_in: TestClient, filled: Filled
) -> None:
    """Like a pause, a trigger and a backfill take a note (why), kept through the
    backfill's preview and recorded in the audit and shown on its page."""
    token = csrf_token(signed_in)
    signed_in.post(
        f"/entries/{ENTRY}/trigger", data={"csrf_token": token, "note": "rerun after the fix"}
    )
    anchor = filled.store.states(filled.namespace)[ENTRY].anchor
    form = {
        "csrf_token": token,
        "start": format_window(anchor - timedelta(seconds=2)),
        "end": format_window(anchor - timedelta(seconds=1)),
        "note": "outage of 3 March",
    }
    preview = signed_in.post(f"/entries/{ENTRY}/backfill", data=form)
    assert 'name="note" value="outage of 3 March"' in preview.text
    signed_in.post(f"/entries/{ENTRY}/backfill", data={**form, "confirm": "yes"})
    backfilled, triggered = filled.store.audit(filled.namespace)
    assert (triggered.action.value, triggered.note) == ("trigger", "rerun after the fix")
    assert (backfilled.action.value, backfilled.note) == ("backfill", "outage of 3 March")
    page = signed_in.get("/audit")
    assert "rerun after the fix" in page.text
    assert "outage of 3 March" in page.text


@pytest.mark.parametrize("note", ["<script>alert(1)</script>", "a\x00b", "x" * 1001])
def test_skip_next_with_a_hostile_note_is_escaped_or_refused_on_the_form(
    signed_in: TestClient, filled: Filled, note: str
) -> None:
    """A note with markup is stored as typed and shown escaped; one no store holds (a NUL,
    past 1,000 characters) is refused on the form with nothing recorded."""
    form = {"csrf_token": csrf_token(signed_in), "note": note}
    answer = signed_in.post(f"/entries/{ENTRY}/skip-next", data=form)
    assert answer.status_code < 500
    assert "<script>alert(1)" not in answer.text
    audit = filled.store.audit(filled.namespace)
    if note.startswith("<"):
        assert [r.note for r in audit] == [note]
        page = signed_in.get("/audit").text
        assert "<script>alert(1)" not in page
        assert "&lt;script&gt;alert(1)" in page
    else:
        assert audit == []
        assert not [
            r for r in filled.store.history(filled.namespace, ENTRY) if r.reason == "operator"
        ]


def test_the_next_window_after_skips_ahead_does_not_depend_on_the_rows_listed(
    signed_in: TestClient, filled: Filled
) -> None:
    """An entry's page listing one history row (`?limit=1`) still shows as next the window
    after every window skipped ahead, not one of them."""
    for _ in range(2):
        form = {"csrf_token": csrf_token(signed_in), "note": ""}
        signed_in.post(f"/entries/{ENTRY}/skip-next", data=form)
    skipped = sorted(
        r.window for r in filled.store.history(filled.namespace, ENTRY) if r.reason == "operator"
    )
    shown = {
        limit: re.search(
            r"<dt>next window</dt><dd>(.*?)</dd>",
            signed_in.get(f"/entries/{ENTRY}?limit={limit}").text,
            re.DOTALL,
        )
        for limit in (1, 50)
    }
    assert shown[1] is not None
    assert shown[50] is not None
    assert shown[1].group(1) == shown[50].group(1)
    assert format_window(skipped[0]) not in shown[1].group(1)
