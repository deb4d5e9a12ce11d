"""safebeat's APScheduler executor, run time by run time, on a real SQLite store: the claim,
APScheduler's misfire rule, the job's window, refusals and recorded outcomes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
from apscheduler.schedulers.background import BackgroundScheduler

import safebeat
from safebeat.config import Config, load_config
from safebeat.contrib.apscheduler import Guard, JobRefused, ThreadPoolExecutor, run_job
from safebeat.current import CurrentWindow
from safebeat.errors import ConfigError
from safebeat.stores import open_store
from safebeat.stores.protocols import Outcome, Status
from tests import services

UTC = timezone.utc


def make_job(func: Callable[[], Any], job_id: str | None = "report", grace: int | None = 1) -> Any:
    """A real APScheduler job, as a scheduler would hand it to its executor."""
    return BackgroundScheduler(timezone="UTC").add_job(
        func, "cron", minute="*", id=job_id, misfire_grace_time=grace
    )


def guard(url: str, namespace: str, *, fail_open: bool = False) -> Guard:
    return Guard(Config(url=url, namespace=namespace), fail_open)


def just_now() -> datetime:
    """A run time that is due now (whole seconds, as a cron trigger gives them)."""
    return datetime.now(UTC).replace(microsecond=0)


def kinds(events: list[Any]) -> list[int]:
    return [event.code for event in events]


def test_of_two_replicas_handed_one_run_time_only_the_first_runs_it(
    sqlite_url: str, namespace: str
) -> None:
    """Two executors given the same run time: one runs the job (seeing its window and the
    executor's store in safebeat.claim), the other skips it without an event."""
    seen: list[tuple[CurrentWindow | None, bool]] = []

    def job() -> None:
        seen.append((safebeat.current_window(), bool(safebeat.claim("report-mailed"))))

    run_time = just_now().astimezone(timezone(timedelta(hours=3)))  # the trigger's zone
    first = run_job(guard(sqlite_url, namespace), make_job(job), "default", [run_time], "t")
    second = run_job(guard(sqlite_url, namespace), make_job(job), "default", [run_time], "t")

    assert kinds(first) == [EVENT_JOB_EXECUTED]
    assert second == []
    assert seen == [(CurrentWindow("report", run_time.astimezone(UTC), run_time.tzinfo), True)]
    assert safebeat.current_window() is None
    store = open_store(sqlite_url)
    [row] = store.history(namespace, "report")
    assert row.window == run_time
    assert (row.status, row.reason, row.outcome) == (Status.SENT, "apscheduler", Outcome.SUCCESS)
    assert "report" in store.states(namespace)
    store.close()


def test_a_run_time_past_misfire_grace_time_is_missed_and_not_claimed(
    sqlite_url: str, namespace: str
) -> None:
    """As in APScheduler, a run time older than misfire_grace_time is EVENT_JOB_MISSED; it is
    not claimed, so a replica that was on time could still have run it."""
    calls: list[int] = []
    late = just_now() - timedelta(seconds=30)
    events = run_job(
        guard(sqlite_url, namespace), make_job(lambda: calls.append(1)), "default", [late], "t"
    )
    assert kinds(events) == [EVENT_JOB_MISSED]
    assert calls == []
    store = open_store(sqlite_url)
    store.migrate()  # the executor never even opened the store
    assert store.history(namespace) == []
    store.close()


def test_each_run_time_handed_over_is_claimed_on_its_own(sqlite_url: str, namespace: str) -> None:
    """Without coalescing APScheduler hands over every due run time; each is its own window,
    and one already claimed elsewhere is the only one skipped."""
    calls: list[datetime] = []

    def job() -> None:
        window = safebeat.current_window()
        assert window is not None
        calls.append(window.window)

    older, newer = just_now() - timedelta(minutes=1), just_now()
    run_job(guard(sqlite_url, namespace), make_job(job, grace=None), "default", [older], "t")
    events = run_job(
        guard(sqlite_url, namespace), make_job(job, grace=None), "default", [older, newer], "t"
    )
    assert kinds(events) == [EVENT_JOB_EXECUTED]
    assert calls == [older, newer]


def test_a_failing_job_is_recorded_as_a_failure(sqlite_url: str, namespace: str) -> None:
    """A job that raises gives APScheduler's EVENT_JOB_ERROR and a `failure` on its row."""

    def job() -> None:
        raise RuntimeError("mail server down")

    events = run_job(guard(sqlite_url, namespace), make_job(job), "default", [just_now()], "t")
    assert kinds(events) == [EVENT_JOB_ERROR]
    assert isinstance(events[0].exception, RuntimeError)
    store = open_store(sqlite_url)
    [row] = store.history(namespace, "report")
    store.close()
    assert row.outcome is Outcome.FAILURE


def test_a_job_without_an_id_of_its_own_is_refused(
    sqlite_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A job id APScheduler generated (different in each replica) cannot be claimed across
    replicas: not run, EVENT_JOB_ERROR, and the log says to give add_job an id."""
    calls: list[int] = []
    job = make_job(lambda: calls.append(1), job_id=None)
    with caplog.at_level(logging.ERROR):
        events = run_job(guard(sqlite_url, namespace), job, "default", [just_now()], "t")
    assert kinds(events) == [EVENT_JOB_ERROR]
    assert isinstance(events[0].exception, JobRefused)
    assert calls == []
    assert "give add_job an id" in caplog.text


def test_an_unreachable_store_fails_closed_unless_fail_open(namespace: str) -> None:
    """With the store down the job is not run (EVENT_JOB_ERROR naming the store, no password);
    with fail_open it runs, untracked."""
    url = f"postgresql://app:hunter2@127.0.0.1:{services.free_port()}/app"
    calls: list[int] = []
    job = make_job(lambda: calls.append(1))
    events = run_job(guard(url, namespace), job, "default", [just_now()], "t")
    assert kinds(events) == [EVENT_JOB_ERROR]
    assert "not running it (fail closed)" in str(events[0].exception)
    assert "hunter2" not in str(events[0].exception)
    assert calls == []
    events = run_job(guard(url, namespace, fail_open=True), job, "default", [just_now()], "t")
    assert kinds(events) == [EVENT_JOB_EXECUTED]
    assert calls == [1]


def test_settings_are_read_like_beat_s_and_bad_ones_are_named(
    monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    """The executor reads safebeat_* settings (the environment overriding them) and names a
    bad one when it is built, not at the first run."""
    monkeypatch.setenv("SAFEBEAT_NAMESPACE", "from-env")
    executor = ThreadPoolExecutor(settings={"safebeat_url": sqlite_url, "safebeat_namespace": "x"})
    assert executor.guard.config == load_config(
        {"safebeat_url": sqlite_url, "safebeat_namespace": "x"}
    )
    assert executor.guard.config.namespace == "from-env"
    executor.shutdown()
    with pytest.raises(ConfigError, match="safebeat_grace"):
        ThreadPoolExecutor(settings={"safebeat_grace": "soon"})
    with pytest.raises(ConfigError, match="fail_open='maybe'"):
        ThreadPoolExecutor(fail_open="maybe")  # type: ignore[arg-type]
