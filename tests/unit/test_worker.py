"""The worker hook's decisions, driven through a task's real `before_start` on a memory store."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from celery.exceptions import Ignore, Reject, TimeLimitExceeded, WorkerLostError

import safebeat.worker
from safebeat.beat.message_fields import headers_for
from safebeat.config import Config
from safebeat.entries import compile_entry
from safebeat.errors import StoreUnavailable
from safebeat.identity import Replica, format_window, task_id_for
from safebeat.records import LeasedRun, RunEnd
from safebeat.stores.per_process import store_of
from safebeat.stores.protocols import NewClaim, Outcome, Reclaim, Start, Status, Store, TickPlan
from safebeat.worker import delivery as worker_delivery
from safebeat.worker.metrics import WorkerTotals
from tests.unit.test_scheduler import drain

NAMESPACE = "unit"
WINDOW = datetime(2026, 3, 2, 6, 0, tzinfo=timezone.utc)
REPLICA = Replica("beat-host", 1, "b00000")


@pytest.fixture(autouse=True)
def fresh_counters(monkeypatch: pytest.MonkeyPatch) -> WorkerTotals:
    """Each test starts with zeroed counters and no store backoff."""
    totals = WorkerTotals()
    monkeypatch.setattr(safebeat.worker.worker_metrics, "totals", totals)
    monkeypatch.setattr(safebeat.worker, "stats", totals)
    monkeypatch.setattr(worker_delivery, "backoff", worker_delivery.StoreBackoff())
    monkeypatch.setattr(worker_delivery, "warned", set())
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


def deliver(
    task: Any, task_id: str, *, window: datetime = WINDOW, ends: str = "SUCCESS", **request: Any
) -> str:
    """Run the task the way a worker's tracer does: before_start, body, postrun; return state
    (the body's end is `ends`: RETRY as if it asked Celery for a retry)."""
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
            state = ends
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
    """A retry of the window (a higher retry number, after a run that ended asking for it)
    runs; its own redelivery does not, nor does a late retry of a window that succeeded."""
    task_id = dispatch(app)
    assert deliver(task, task_id, ends="RETRY") == "RETRY"
    assert deliver(task, task_id, retries=1) == "SUCCESS"
    assert deliver(task, task_id, retries=1) == "IGNORED"
    assert deliver(task, task_id, retries=2) == "IGNORED"
    assert ran == [task_id, task_id]
    assert (row(app).retries, row(app).runs, row(app).duplicates) == (1, 2, 2)
    assert row(app).outcome is Outcome.SUCCESS


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


def test_an_unfinished_run_whose_lease_expired_is_taken_over(
    app: Celery, task: Any, ran: list[str], fresh_counters: WorkerTotals
) -> None:
    """A delivery of a window whose run stopped renewing its lease, with no end recorded,
    runs again (no time limit involved)."""
    task_id = dispatch(app)
    store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", WINDOW, "dead@host:9", 0), lease=timedelta(0)
    )
    assert deliver(task, task_id) == "SUCCESS"
    assert ran == [task_id]
    assert fresh_counters.taken_over == 1
    assert (row(app).runs, row(app).outcome) == (2, Outcome.SUCCESS)


def test_a_delivery_of_a_live_run_is_sent_again_for_later_and_skipped(
    app: Celery, task: Any, ran: list[str], fresh_counters: WorkerTotals
) -> None:
    """A redelivery while the window's run holds a live lease does not run and is not lost:
    the same message (same id, same headers) is sent again to look one renewal period (a
    third of the lease) later, so it comes soon after a dead run's lease lapsed, not up to
    a whole lease after."""
    app.conf.safebeat_execution_lease = "30s"
    queue = app.conf.task_default_queue = f"q-{uuid.uuid4().hex[:8]}"
    task_id = dispatch(app)
    store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", WINDOW, "alive@host:9", 0), lease=timedelta(hours=1)
    )
    before = datetime.now(timezone.utc)
    assert deliver(task, task_id) == "IGNORED"
    after = datetime.now(timezone.utc)
    assert ran == []
    [copy] = drain(app, queue)
    assert (copy["id"], copy["task"]) == (task_id, "reports.weekly")
    assert (copy["safebeat_entry"], copy["safebeat_window"]) == ("weekly", "2026-03-02T06:00:00Z")
    eta = datetime.fromisoformat(copy["eta"])
    assert before + timedelta(seconds=10) <= eta <= after + timedelta(seconds=10)
    assert copy["retries"] == 0
    assert (fresh_counters.deferred, row(app).duplicates, row(app).runs) == (1, 0, 1)


def test_a_deferral_the_broker_refuses_goes_back_to_the_broker(
    app: Celery, task: Any, ran: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the copy of a deferred delivery cannot be sent, the delivery is rejected with
    requeue, so the broker keeps it (acks late): it is never acknowledged away."""
    monkeypatch.setattr(task, "acks_late", True)
    task_id = dispatch(app)
    store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", WINDOW, "alive@host:9", 0), lease=timedelta(hours=1)
    )

    class Unsendable:
        def apply_async(self) -> None:
            raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(type(task), "signature_from_request", lambda *a, **k: Unsendable())
    headers = {"safebeat_entry": "weekly", "safebeat_window": format_window(WINDOW)}
    task.push_request(id=task_id, headers=headers, is_eager=False, hostname="w1@host")
    try:
        with pytest.raises(Reject) as rejected:
            task.before_start(task_id, (), {})
    finally:
        task.pop_request()
    assert rejected.value.requeue is True
    assert ran == []


def test_forbid_defers_a_window_while_another_window_of_the_entry_runs(
    app: Celery, task: Any, ran: list[str], fresh_counters: WorkerTotals
) -> None:
    """With overlap="forbid", an older window delivered while a newer one runs with a live
    lease waits (is sent again), so two windows of the entry never run at once."""
    queue = app.conf.task_default_queue = f"q-{uuid.uuid4().hex[:8]}"
    later = WINDOW + timedelta(days=7)
    older_id, _ = dispatch(app), dispatch(app, later)
    store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", later, "alive@host:9", 0), lease=timedelta(hours=1)
    )
    forbid = {
        "safebeat_entry": "weekly",
        "safebeat_window": format_window(WINDOW),
        "safebeat_overlap": "forbid",
    }
    assert deliver(task, older_id, headers=forbid) == "IGNORED"
    assert ran == []
    [copy] = drain(app, queue)
    assert (copy["id"], copy["safebeat_overlap"]) == (older_id, "forbid")
    store(app).finish_execution(
        NAMESPACE,
        LeasedRun("weekly", later, "alive@host:9", 0),
        RunEnd(Outcome.SUCCESS, timedelta(seconds=1)),
    )
    assert deliver(task, older_id, headers=forbid) == "SUCCESS"
    assert ran == [older_id]


def test_reject_with_requeue_ends_the_lease_so_the_requeued_copy_runs(
    app: Celery, task: Any, ran: list[str]
) -> None:
    """A run that raised Reject(requeue=True) counts as not run: its requeued copy runs
    at once instead of waiting for a lease or being skipped as a duplicate."""
    task_id = dispatch(app)
    headers = {"safebeat_entry": "weekly", "safebeat_window": format_window(WINDOW)}
    task.push_request(id=task_id, headers=headers, is_eager=False, hostname="w1@host")
    try:
        task.before_start(task_id, (), {})
        safebeat.worker._on_postrun(
            task=task, state="REJECTED", retval=Reject("busy", requeue=True)
        )
    finally:
        task.pop_request()
    assert row(app).finished_at is None
    assert deliver(task, task_id, hostname="w2@host") == "SUCCESS"
    assert ran == [task_id]
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
    safebeat.stores.per_process._configs.pop(task.app, None)
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
            NAMESPACE, LeasedRun("weekly", later, "dead@host:9", 0), lease=timedelta(0)
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


def test_a_run_sends_execution_started_and_finished_and_a_duplicate_neither(
    app: Celery, task: Any
) -> None:
    """A delivery that runs sends execution_started before its body and execution_finished
    with its outcome after; a retry that runs again does too; a duplicate sends neither."""
    from safebeat import signals

    received: list[tuple[Any, ...]] = []

    def receiver(signal: Any = None, sender: Any = None, **arguments: Any) -> None:
        ending = (
            (arguments["outcome"], type(arguments["duration"])) if "outcome" in arguments else ()
        )
        received.append((signal.name, arguments["task_id"], arguments["start"], *ending))

    signals.execution_started.connect(receiver, weak=False)
    signals.execution_finished.connect(receiver, weak=False)
    try:
        task_id = dispatch(app)
        deliver(task, task_id, ends="RETRY")
        deliver(task, task_id, retries=1)
        deliver(task, task_id)
    finally:
        signals.execution_started.disconnect(receiver)
        signals.execution_finished.disconnect(receiver)
    assert received == [
        ("safebeat.execution_started", task_id, "run"),
        ("safebeat.execution_finished", task_id, "run", "retry", timedelta),
        ("safebeat.execution_started", task_id, "run"),
        ("safebeat.execution_finished", task_id, "run", "success", timedelta),
    ]


def test_delivery_and_run_end_hooks_hear_each_verdict_and_outcome(app: Celery, task: Any) -> None:
    """safebeat.hooks: the delivery hook hears run, duplicate and untracked; the run's end
    hook hears how the run ended; a hook that raises changes nothing."""
    from safebeat import hooks

    heard: list[tuple[str, ...]] = []

    def verdict(delivery: hooks.Delivery) -> None:
        heard.append(("delivery", delivery.entry, delivery.verdict, str(delivery.namespace)))

    def end(run: hooks.RunEnd) -> None:
        heard.append(("end", run.entry, run.outcome, run.start))
        raise RuntimeError("hook bug")

    hooks.on_delivery(verdict)
    hooks.on_run_end(end)
    try:
        task_id = dispatch(app)
        assert deliver(task, task_id, ends="FAILURE") == "FAILURE"
        assert deliver(task, task_id) == "IGNORED"
        unknown = task_id_for(NAMESPACE, "weekly", WINDOW + timedelta(days=1))
        deliver(task, unknown, window=WINDOW + timedelta(days=1))
    finally:
        hooks.remove(verdict)
        hooks.remove(end)
    assert heard == [
        ("delivery", "weekly", "run", NAMESPACE),
        ("end", "weekly", "failure", "run"),
        ("delivery", "weekly", "duplicate", NAMESPACE),
        ("delivery", "weekly", "untracked", NAMESPACE),
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


class PoolRequest:
    """What Celery's main process holds for a message it handed to a pool child."""

    def __init__(self, task: Any, task_id: str, child_pid: int) -> None:
        self.task, self.id, self.hostname = task, task_id, "w1@host"
        self.worker_pid: int | None = None
        self.request_dict = {
            "id": task_id,
            "retries": 0,
            "safebeat_entry": "weekly",
            "safebeat_window": format_window(WINDOW),
        }
        self.child_pid = child_pid


def lost_in_child(app: Celery, task: Any, exception: Exception) -> PoolRequest:
    """A child of the worker starts the window, then dies; the main process is told."""
    task_id = dispatch(app)
    request = PoolRequest(task, task_id, child_pid=4242)
    safebeat.worker._on_received(request=request)
    request.worker_pid = request.child_pid  # the pool accepted it
    verdict = store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", WINDOW, "w1@host:4242", 0), lease=timedelta(hours=1)
    )
    assert verdict is Start.RUN
    safebeat.worker._on_failure(task_id=task_id, exception=exception)
    return request


def test_a_lost_pool_child_frees_its_window_at_once(app: Celery, task: Any, ran: list[str]) -> None:
    """A child killed mid-run (WorkerLostError in the main process) ends its run's lease,
    so the next delivery takes the window over without waiting for the lease."""
    lost_in_child(app, task, WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL)."))
    assert row(app).finished_at is None
    assert deliver(task, row(app).task_id, hostname="w2@host") == "SUCCESS"
    assert ran == [row(app).task_id]
    assert (row(app).runs, row(app).outcome) == (2, Outcome.SUCCESS)


def test_a_child_killed_at_its_hard_time_limit_is_recorded_as_failed(
    app: Celery, task: Any, ran: list[str]
) -> None:
    """A hard time limit kill is recorded from the main process as a failure, with why;
    a later delivery is a duplicate, since running again would meet the same limit."""
    lost_in_child(app, task, TimeLimitExceeded(5.0))
    record = row(app)
    assert (record.outcome, record.runs) == (Outcome.FAILURE, 1)
    assert record.error == "the pool killed the run at its hard time limit (5.0 s)"
    assert deliver(task, record.task_id, hostname="w2@host") == "IGNORED"
    assert ran == []


def test_a_store_error_while_recording_the_end_keeps_the_lease_until_it_is_recorded(
    app: Celery, task: Any, ran: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When recording a run's end fails (the task thread's idle connection was cut), the
    lease stays held and the next renewal round records the end: the finished window
    never looks dead, and a later copy is a duplicate, never a takeover (issue 29, hole 2)."""
    task_id = dispatch(app)
    the_store = store(app)
    record_end = the_store.finish_execution
    calls: list[int] = []

    def fails_once(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise StoreUnavailable("server closed the connection unexpectedly")
        record_end(*args, **kwargs)

    monkeypatch.setattr(the_store, "finish_execution", fails_once)
    assert deliver(task, task_id) == "SUCCESS"
    assert row(app).finished_at is None
    worker_delivery.renewer.renew_now()
    record = row(app)
    assert (record.outcome, len(calls)) == (Outcome.SUCCESS, 2)
    assert worker_delivery.renewer.held() == []
    monkeypatch.setattr(worker_delivery, "backoff", worker_delivery.StoreBackoff())
    assert deliver(task, task_id, hostname="w2@host") == "IGNORED"
    assert ran == [task_id]


def test_a_deferred_copy_carries_every_header_beat_sets(
    app: Celery, task: Any, ran: list[str]
) -> None:
    """A deferred copy carries every header beat puts on a window's message (overlap,
    pause_after_failures, ...), also from a request that holds them only as attributes
    (its `headers` empty), so the copy that later takes the run over keeps the entry's
    options."""
    queue = app.conf.task_default_queue = f"q-{uuid.uuid4().hex[:8]}"
    task_id = dispatch(app)
    store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", WINDOW, "alive@host:9", 0), lease=timedelta(hours=1)
    )
    raw = {
        "task": "reports.weekly",
        "schedule": 3600,
        "options": {"safebeat": {"overlap": "forbid", "pause_after_failures": 3}},
    }
    entry = compile_entry("weekly", raw, app_timezone=timezone.utc, config=Config())
    sent = headers_for(entry, format_window(WINDOW))
    task.push_request(id=task_id, is_eager=False, hostname="w1@host", **sent)
    task.request.headers = None
    try:
        with pytest.raises(Ignore):
            task.before_start(task_id, (), {})
    finally:
        task.pop_request()
    assert ran == []
    [copy] = drain(app, queue)
    assert {name: copy.get(name) for name in sent} == sent


def test_under_acks_early_a_refused_deferral_is_left_to_beat_as_a_dead_run(
    app: Celery, task: Any, ran: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acks early, overlap="forbid": a window deferred while another window of the entry
    runs, whose copy the broker refuses, is acknowledged already, so a requeue would do
    nothing. It is recorded as a run that died at once (a start whose lease has lapsed),
    which beat's periodic pass re-publishes with the same id: the window is not lost."""
    later = WINDOW + timedelta(days=7)
    older_id, _ = dispatch(app), dispatch(app, later)
    store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", later, "alive@host:9", 0), lease=timedelta(hours=1)
    )

    class Unsendable:
        def apply_async(self) -> None:
            raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(type(task), "signature_from_request", lambda *a, **k: Unsendable())
    assert not task.acks_late  # Celery's default
    forbid = {
        "safebeat_entry": "weekly",
        "safebeat_window": format_window(WINDOW),
        "safebeat_overlap": "forbid",
    }
    assert deliver(task, older_id, headers=forbid) == "IGNORED"
    assert ran == []
    [older] = [r for r in store(app).history(NAMESPACE, "weekly") if r.window == WINDOW]
    assert older.started_at is not None
    assert older.finished_at is None
    assert older.lease_until is not None
    assert older.lease_until <= store(app).clock()
    # Beat's periodic pass takes the dead run over and re-publishes it, same task id.
    result = store(app).tick(
        NAMESPACE,
        [],
        lambda n, s: TickPlan(),
        replica=REPLICA,
        reclaim=Reclaim(timeout=timedelta(seconds=30), defines=frozenset({"weekly"})),
    )
    assert result is not None
    assert [c.task_id for c in result.reclaimed] == [older_id]


def test_a_retry_that_comes_while_its_previous_attempt_lives_is_deferred_not_run(
    app: Celery,
    task: Any,
    ran: list[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Celery retry's message delivered before its previous attempt's end is recorded
    (issue 29, hole 3) does not run beside it. Under acks early with its deferred copy
    refused, the message is gone and nothing in the store covers that retry: an error
    says so."""
    task_id = dispatch(app)
    store(app).start_execution(
        NAMESPACE, LeasedRun("weekly", WINDOW, "alive@host:9", 0), lease=timedelta(hours=1)
    )

    class Unsendable:
        def apply_async(self) -> None:
            raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(type(task), "signature_from_request", lambda *a, **k: Unsendable())
    with caplog.at_level(logging.WARNING, "safebeat.worker"):
        assert deliver(task, task_id, retries=1) == "IGNORED"
    assert ran == []
    assert (row(app).worker, row(app).retries, row(app).runs) == ("alive@host:9", 0, 1)
    assert "retry 1 of entry 'weekly'" in caplog.text
    assert "this retry is lost" in caplog.text
