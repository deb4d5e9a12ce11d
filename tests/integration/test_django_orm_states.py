"""The ORM store reads every entry's state with its facts in one statement, whatever the
number of entries: the round trips of a tick do not grow with the schedule."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from safebeat.identity import Replica
from safebeat.records import EntryState, TickPlan
from safebeat.stores.django.orm import DjangoOrmStore
from tests import djangosite
from tests.benchmarks.bench_django_states import fill

pytestmark = pytest.mark.django

REPLICA = Replica("host-a", 101, "aaaaaa")


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def alias(request: pytest.FixtureRequest) -> str:
    """An alias of each vendor the ORM store runs on (PostgreSQL too: through psycopg2 the
    `django://` store is the ORM store there)."""
    return djangosite.alias_for(request, request.param)


def statements_of_a_tick(alias: str, entries: int) -> tuple[list[str], dict[str, EntryState]]:
    """The statements of a tick over `entries` entries with history (that claims nothing),
    and the states its planner was given."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    names = fill(alias, entries, 3, namespace)
    store = DjangoOrmStore(f"django://{alias}")
    seen: dict[str, EntryState] = {}

    def planner(now: datetime, states: Any) -> TickPlan:
        seen.update(states)
        return TickPlan()

    with CaptureQueriesContext(connections[alias]) as captured:
        assert store.tick(namespace, names, planner, replica=REPLICA) is not None
    return [query["sql"] for query in captured.captured_queries], seen


def test_a_tick_reads_states_in_one_statement_whatever_the_entries(alias: str) -> None:
    few, few_states = statements_of_a_tick(alias, 5)
    many, many_states = statements_of_a_tick(alias, 1500)
    assert len(many) == len(few)
    reads = [sql for sql in many if "safebeat_entry" in sql and sql.startswith("SELECT")]
    assert len(reads) == 1, reads
    for states, count in ((few_states, 5), (many_states, 1500)):
        assert len(states) == count
        for state in states.values():
            assert state.unreadable is None
            assert state.live_run is not None
            assert state.newest_dispatched is not None
            assert state.live_run.window == state.newest_dispatched.window
            assert state.live_run.task_id is not None
