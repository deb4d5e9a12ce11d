"""`safebeat exporter`'s reading on the real backends: it uses only the operator reads
every store has (`states`, `history`), so each backend gives the same facts."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta, timezone

import pytest

from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.identity import Replica, task_id_for
from safebeat.ops.schedule_health import namespace_health
from safebeat.records import LeasedRun, NewClaim, Outcome, RunEnd, TickPlan
from safebeat.stores.protocols import Store
from tests import storevariants

REPLICA = Replica("host-a", 101, "aaaaaa")
WEEK = timedelta(days=7)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
        pytest.param("django-postgres", marks=[pytest.mark.django, pytest.mark.postgres]),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: object) -> Iterator[Store]:
    opened = storevariants.open_variant(request, request.param, tmp_path)
    opened.migrate()
    yield opened
    opened.close()


def test_a_reading_gives_due_windows_outcomes_and_totals_on_every_backend(
    store: Store, namespace: str
) -> None:
    """A weekly entry is due a week after its anchor; a failed run of the other counts it
    failing, with its last sent window and failure instant."""
    config = Config(namespace=namespace)
    entries = {
        name: compile_entry(
            name, {"task": "t.run", "schedule": seconds}, app_timezone=timezone.utc, config=config
        )
        for name, seconds in (("weekly", WEEK.total_seconds()), ("often", 1.0))
    }
    store.register(namespace, [e.definition for e in entries.values()], REPLICA)
    state = store.states(namespace)["often"]
    window = state.anchor + timedelta(seconds=2)
    plan = TickPlan(
        claims=[NewClaim("often", window, task_id_for(namespace, "often", window), "t.run")],
        advances={"often": window},
    )
    result = store.tick(namespace, ["often"], lambda now, states: plan, replica=REPLICA)
    assert result is not None
    store.record_publish(namespace, [c.id for c in result.claimed], {})
    run = LeasedRun("often", window, "worker@host:1", 0)
    store.start_execution(namespace, run, lease=timedelta(minutes=5))
    store.finish_execution(namespace, run, RunEnd(Outcome.FAILURE, timedelta(seconds=1)))

    health = namespace_health(
        store,
        namespace,
        entries,
        grace=timedelta(hours=1),
        claim_timeout=timedelta(seconds=30),
        max_entries=10,
        recent_rows=100,
    )

    assert (health.entries, health.failing, health.overdue, health.unsent_claims) == (2, 1, 0, 0)
    by_name = {e.name: e for e in health.detailed}
    weekly_anchor = store.states(namespace)["weekly"].anchor
    assert by_name["weekly"].next_due == weekly_anchor + WEEK
    often = by_name["often"]
    assert often.last_sent_window == window
    assert often.last_failure is not None
    assert often.last_success is None
    assert often.next_due == window + timedelta(seconds=1)
