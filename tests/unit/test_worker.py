"""The worker hook's decisions, driven through a task's real `before_start` on a memory store."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import Ignore

import safebeat.worker
from safebeat.identity import Replica, format_window, task_id_for
from safebeat.local_store import store_of
from safebeat.stores.base import NewClaim, Outcome, Status, Store, TickPlan
from safebeat.worker_metrics import WorkerTotals

NAMESPACE = "unit"
WINDOW = datetime(2026, 3, 2, 6, 0, tzinfo=timezone.utc)
REPLICA = Replica("beat-host", 1, "b00000")


@pytest.fixture(autouse=True)
def fresh_counters(monkeypatch: pytest.MonkeyPatch) -> WorkerTotals:
    """Each test starts with zeroed counters and no store backoff."""
    totals = WorkerTotals()
    monkeypatch.setattr(safebeat.worker.worker_metrics, "totals", totals)
    monkeypatch.setattr(safebeat.worker, "stats", totals)
    monkeypatch.setattr(safebeat.worker, "_backoff", safebeat.worker._StoreBackoff())
    monkeypatch.setattr(safebeat.worker, "_warned", set())
    return totals


@pytest.fixture
def app() -> Celery:
    app = Celery("unit", broker="memory://", set_as_current=False)
    app.conf.update(
        safebeat_url=f"memory://worker-{uuid.uuid4().hex}", safebeat_namespace=NAMESPACE
    )
    safebeat.worker.install(app)
    return app


@pytest.fixture
def ran(app: Celery) -> list[str]:
    """Task ids whose body ran."""
    return []


@pytest.fixture
def task(app: Celery, ran: list[str]) -> Any:
    @app.task(name="reports.weekly", bind=True, shared=False)
    def weekly(self: Any) -> None:
        ran.append(self.request.id)

    app.finalize()  # as a worker does before it runs anything
    return app.tasks["reports.weekly"]


def store(app: Celery) -> Store:
    return store_of(app)[1]


def dispatch(app: Celery, window: datetime = WINDOW) -> str:
    """Claim `window` of entry "weekly" as beat would; return its task id."""
    task_id = task_id_for(NAMESPACE, "weekly", window)
    claim = NewClaim("weekly", window, task_id, "reports.weekly")
    store(app).tick(NAMESPACE, [], lambda n, s: TickPlan(claims=[claim]), replica=REPLICA)
    return task_id


def deliver(task: Any, task_id: str, *, window: datetime = WINDOW, **request: Any) -> str:
    """Run the task the way a worker's tracer does: before_start, body, postrun; return state."""
    headers = {"safebeat_entry": "weekly", "safebeat_window": format_window(window)}
    context = {"id": task_id, "headers": headers, "is_eager": False, "hostname": "w1@host"}
    task.push_request(**{**context, **request})
    try:
        try:
            task.before_start(task_id, (), {})
        except Ignore:
            state = "IGNORED"
        else:
            task.run()
            state = "SUCCESS"
        safebeat.worker._on_postrun(task=task, state=state)
    finally:
        task.pop_request()
    return state


def row(app: Celery) -> Any:
    [record] = store(app).history(NAMESPACE, "weekly")
    return record


def test_first_delivery_runs_and_is_recorded(app: Celery, task: Any, ran: list[str]) -> None:
    """The first delivery of a window runs its body; start, end and outcome are recorded."""
    task_id = dispatch(app)
    assert deliver(task, task_id) == "SUCCESS"
    assert ran == [task_id]
    record = row(app)
    assert record.worker.startswith("w1@host:")
    assert (record.outcome, record.runs, record.duplicates) == (Outcome.SUCCESS, 1, 0)
    assert record.runtime is not None
    assert record.finished_at >= record.started_at


def test_second_delivery_is_skipped_counted_and_logged(
    app: Celery,
    task: Any,
    ran: list[str],
    fresh_counters: WorkerTotals,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A redelivery of a window that already ran is acknowledged without running the body."""
    task_id = dispatch(app)
    deliver(task, task_id)
    with caplog.at_level(logging.WARNING, "safebeat.worker"):
        assert deliver(task, task_id, hostname="w2@host") == "IGNORED"
    assert ran == [task_id]
    assert row(app).duplicates == 1
    assert fresh_counters.duplicates == 1
    assert "duplicate delivery of entry 'weekly' window 2026-03-02T06:00:00Z" in caplog.text


def test_a_celery_retry_runs_and_records_each_outcome(
    app: Celery, task: Any, ran: list[str]
) -> None:
    """A retry of the window (a higher retry number) runs; its own redelivery does not."""
    task_id = dispatch(app)
    deliver(task, task_id)
    assert deliver(task, task_id, retries=1) == "SUCCESS"
    assert deliver(task, task_id, retries=1) == "IGNORED"
    assert ran == [task_id, task_id]
    assert (row(app).retries, row(app).runs, row(app).duplicates) == (1, 2, 1)


def test_postrun_states_become_outcomes(app: Celery, task: Any) -> None:
    """Celery's RETRY and FAILURE states are recorded as the retry and failure outcomes."""
    first, second = dispatch(app), dispatch(app, WINDOW + timedelta(days=7))
    for task_id, window, state in (
        (first, WINDOW, "RETRY"),
        (second, WINDOW + timedelta(days=7), "FAILURE"),
    ):
        task.push_request(
            id=task_id,
            headers={"safebeat_entry": "weekly", "safebeat_window": format_window(window)},
            is_eager=False,
        )
        task.before_start(task_id, (), {})
        safebeat.worker._on_postrun(task=task, state=state)
        task.pop_request()
    outcomes = {r.window: r.outcome for r in store(app).history(NAMESPACE)}
    assert outcomes == {WINDOW: Outcome.RETRY, WINDOW + timedelta(days=7): Outcome.FAILURE}


def test_an_unfinished_run_past_the_time_limit_is_taken_over(
    app: Celery, task: Any, ran: list[str], fresh_counters: WorkerTotals
) -> None:
    """A delivery after the first run's hard time limit, with no end recorded, runs again."""
    task_id = dispatch(app)
    task.push_request(id=task_id, headers=None, is_eager=False)
    store(app).start_execution(
        NAMESPACE, "weekly", WINDOW, worker="dead@host:9", retries=0, stale_after=timedelta(0)
    )
    task.pop_request()
    assert deliver(task, task_id, timelimit=(1e-6, None)) == "SUCCESS"
    assert ran == [task_id]
    assert fresh_counters.taken_over == 1
    assert (row(app).runs, row(app).outcome) == (2, Outcome.SUCCESS)


def test_tasks_without_safebeat_headers_are_untouched(
    app: Celery, task: Any, ran: list[str]
) -> None:
    """A message without safebeat's headers runs every time and writes nothing."""
    for _ in range(2):
        task.push_request(id="plain-id", headers={"tenant": "acme"}, is_eager=False)
        try:
            task.before_start("plain-id", (), {})
            task.run()
        finally:
            task.pop_request()
    assert ran == ["plain-id", "plain-id"]
    assert store(app).history(NAMESPACE) == []


def test_eager_calls_are_untouched(app: Celery, task: Any, ran: list[str]) -> None:
    """`task.apply(headers=...)` with safebeat's headers runs without asking the store."""
    task_id = dispatch(app)
    headers = {"safebeat_entry": "weekly", "safebeat_window": format_window(WINDOW)}
    task.apply(task_id=task_id, headers=headers)
    task.apply(task_id=task_id, headers=headers)
    assert ran == [task_id, task_id]
    assert row(app).runs == 0


def test_a_task_id_from_another_namespace_runs_untracked(
    app: Celery,
    task: Any,
    ran: list[str],
    fresh_counters: WorkerTotals,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker whose namespace differs from beat's says so and never skips the task."""
    dispatch(app)
    other_id = task_id_for("other-namespace", "weekly", WINDOW)
    with caplog.at_level(logging.WARNING, "safebeat.worker"):
        deliver(task, other_id)
        deliver(task, other_id)
    assert ran == [other_id, other_id]
    assert fresh_counters.untracked == 2
    assert "is safebeat_namespace the same for beat and this worker?" in caplog.text
    assert row(app).runs == 0


def test_a_window_without_a_dispatch_row_runs_untracked(
    app: Celery, task: Any, ran: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A window the store has no claim for (pruned, sent by hand) runs, with a warning."""
    task_id = task_id_for(NAMESPACE, "weekly", WINDOW)
    with caplog.at_level(logging.WARNING, "safebeat.worker"):
        deliver(task, task_id)
        deliver(task, task_id)
    assert ran == [task_id, task_id]
    assert "has no dispatch row in the store" in caplog.text


def test_store_down_fails_open_and_backs_off(
    task: Any,
    ran: list[str],
    tmp_path: object,
    fresh_counters: WorkerTotals,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the store unreachable, tasks run untracked and the store is left alone a while."""
    task.app.conf.safebeat_url = f"sqlite:///{tmp_path}/missing-folder/store.sqlite3"
    safebeat.local_store._configs.pop(task.app, None)
    task_id = task_id_for(NAMESPACE, "weekly", WINDOW)
    with caplog.at_level(logging.WARNING, "safebeat.worker"):
        deliver(task, task_id)
        deliver(task, task_id)
    assert ran == [task_id, task_id]
    assert fresh_counters.store_errors == 1  # the second delivery did not try the store
    assert fresh_counters.untracked == 2  # both ran, neither was tracked
    assert "tasks run untracked (duplicates are not skipped)" in caplog.text


def test_install_guards_tasks_defined_later_and_keeps_their_before_start() -> None:
    """A task defined after install() gets the guard, and its own before_start still runs."""
    app = Celery("later", broker="memory://", set_as_current=False)
    app.conf.safebeat_url = f"memory://worker-{uuid.uuid4().hex}"
    safebeat.worker.install(app)
    safebeat.worker.install(app)  # idempotent
    calls: list[str] = []

    class Audited(app.Task):  # type: ignore[name-defined,misc]
        def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
            calls.append(task_id)

    @app.task(base=Audited, name="later.audited", shared=False)
    def audited() -> None:
        """Nothing."""

    app.finalize()
    guard = type(app.tasks["later.audited"]).before_start
    assert getattr(guard, "_safebeat_guard", False)
    app.tasks["later.audited"].apply(task_id="x")
    assert calls == ["x"]
    assert safebeat.worker.installed(app)


def test_history_keeps_the_dispatch_status(app: Celery, task: Any) -> None:
    """Recording an execution leaves the claim's status to beat."""
    task_id = dispatch(app)
    deliver(task, task_id)
    assert row(app).status is Status.CLAIMED


def test_duplicate_and_takeover_are_sent_as_signals(app: Celery, task: Any) -> None:
    """A skipped duplicate sends execution_duplicate; a takeover sends execution_taken_over."""
    from safebeat import signals

    received: list[tuple[str, str, datetime]] = []

    def receiver(signal: Any = None, sender: Any = None, **arguments: Any) -> None:
        received.append((signal.name, arguments["task_id"], arguments["window"]))

    signals.execution_duplicate.connect(receiver, weak=False)
    signals.execution_taken_over.connect(receiver, weak=False)
    try:
        task_id = dispatch(app)
        deliver(task, task_id)
        deliver(task, task_id)
        later = WINDOW + timedelta(days=7)
        other = dispatch(app, later)
        task.push_request(id=other, headers=None, is_eager=False)
        store(app).start_execution(
            NAMESPACE, "weekly", later, worker="dead@host:9", retries=0, stale_after=timedelta(0)
        )
        task.pop_request()
        deliver(task, other, window=later, timelimit=(1e-6, None))
    finally:
        signals.execution_duplicate.disconnect(receiver)
        signals.execution_taken_over.disconnect(receiver)
    assert received == [
        ("safebeat.execution_duplicate", task_id, WINDOW),
        ("safebeat.execution_taken_over", other, later),
    ]


def test_a_signal_receiver_that_raises_never_fails_the_task(
    app: Celery, task: Any, ran: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver of execution_duplicate that raises is logged; the duplicate is still skipped."""
    from safebeat import signals

    def broken(sender: Any = None, **arguments: Any) -> None:
        raise RuntimeError("plugin bug")

    signals.execution_duplicate.connect(broken, weak=False)
    try:
        task_id = dispatch(app)
        deliver(task, task_id)
        with caplog.at_level(logging.ERROR):
            assert deliver(task, task_id) == "IGNORED"
    finally:
        signals.execution_duplicate.disconnect(broken)
    assert ran == [task_id]
    assert "plugin bug" in caplog.text
