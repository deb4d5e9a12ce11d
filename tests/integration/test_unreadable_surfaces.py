"""An entry whose state the store cannot read back, as the console and the admin show it:
listed as put aside with the store's problem, as `safebeat status` lists it, never a 500
and never hidden; the other entries are shown as usual.

The state is poisoned with the store's own driver (`test_store_contract.poison`: a pause
ending after the year 9999, as an older safebeat stored it)."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from starlette.testclient import TestClient

import safebeat.web
from safebeat.identity import Replica
from safebeat.stores.protocols import Definition, NewClaim, Store
from safebeat.stores.sqlite import SqliteStore
from tests.integration.test_store_contract import poison

REPLICA = Replica("beat-pod-7", 4242, "abcdef")


def poisoned(store: Store, namespace: str) -> None:
    """Entries `victim` and `other` registered; `victim`'s state and one of its history
    rows written as no Python datetime can read back."""
    store.register(
        namespace,
        [Definition("victim", "every 60s", "d1"), Definition("other", "every 60s", "d2")],
        REPLICA,
    )
    [row] = store.claim_extra(
        namespace,
        [NewClaim("victim", store.clock(), "task-1", "t")],
        replica=REPLICA,
        reason="trigger",
    )
    store.record_publish(namespace, [row.id], {})
    poison(store, namespace, "victim", row.id)
    assert store.states(namespace)["victim"].unreadable is not None


def text_of(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_console_lists_an_unreadable_entry_as_put_aside_with_its_problem(
    sqlite_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entries page lists `victim` as unreadable with the store's problem and `other`
    as ok; the entry's page and the audit and doctor pages answer, not a 500."""
    monkeypatch.setattr("safebeat.entries.app_entries.periodic_tasks_reason", lambda app: None)
    store = SqliteStore(sqlite_url)
    store.migrate()
    poisoned(store, namespace)
    problem = store.states(namespace)["victim"].unreadable
    assert problem is not None
    console = safebeat.web.app(url=sqlite_url, namespace=namespace)
    with TestClient(console, base_url="http://127.0.0.1:8765") as client:
        entries = client.get("/")
        assert entries.status_code == 200
        row = re.search(r'<tr data-entry="victim".*?</tr>', entries.text, re.S)
        assert row, "the unreadable entry is not listed"
        assert "unreadable" in row.group(0)
        assert 'class="badge ok"' not in row.group(0)
        said = text_of(entries.text)
        assert problem in said
        assert "put aside" in said
        other = re.search(r'<tr data-entry="other".*?</tr>', entries.text, re.S)
        assert other
        assert 'class="badge ok"' in other.group(0)
        page = client.get("/entries/victim")
        assert page.status_code == 200
        assert problem in text_of(page.text)
        for path in ("/audit", "/doctor", "/replicas"):
            assert client.get(path).status_code == 200, path
    store.close()


@pytest.mark.django
def test_the_admin_lists_an_unreadable_entry_as_put_aside_with_its_problem(
    client: Any, safebeat_db: str, namespace: str
) -> None:
    """The admin's entries page lists `victim` as unreadable with the store's problem, not
    a 500 and not hidden, on SQLite, PostgreSQL and MariaDB; `other` is listed as usual.
    (The history changelist reads dispatch rows through the ORM, which still fails on a
    row it cannot convert on PostgreSQL and MariaDB.)"""
    from safebeat.stores.django import DjangoStore

    store = DjangoStore(f"django://{safebeat_db}")
    poisoned(store, namespace)
    problem = store.states(namespace)["victim"].unreadable
    assert problem is not None
    entries = client.get(f"/admin/safebeat/dispatch/entries/?namespace={namespace}")
    assert entries.status_code == 200
    page = entries.content.decode()
    said = text_of(page)
    assert "victim" in said
    assert "other" in said
    assert "unreadable" in said
    assert problem in said
    assert "put aside" in said
