"""APScheduler 3 in every replica: each run time of a job is claimed once before it runs.

A drop-in for APScheduler's pool executors. Every replica keeps its own scheduler; the
executor claims `(namespace, job id, run time)` in the safebeat store right before the
job would run, and only the replica whose claim is new runs it:

    from apscheduler.schedulers.background import BackgroundScheduler
    from safebeat.contrib.apscheduler import ThreadPoolExecutor

    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(settings={"safebeat_namespace": "reports"})},
        timezone="Europe/Moscow",
    )
    scheduler.add_job(send_report, "cron", day_of_week="mon", hour=6, id="weekly-report")

`settings` are the `safebeat_*` settings (a mapping, or a `safebeat.config.Config`);
`SAFEBEAT_*` environment variables override them, as for beat. Inside the job,
`safebeat.current_window()` gives the job id and the run time (in UTC), and
`safebeat.claim()` uses this executor's store.

Per run time, in the pool's thread (or process), the order is: APScheduler's own
misfire check (`misfire_grace_time`, on this host's clock; a run time missed here is not
claimed, so a replica that is on time can still run it), then the claim (reason
`apscheduler`), then the job, then its outcome on the dispatch row. `coalesce` is
APScheduler's: it decides which run times reach the executor at all. A run time claimed
by another replica is skipped with a log line and no event. If the store cannot be
reached the job is not run and an EVENT_JOB_ERROR is dispatched (fail closed), unless
`fail_open=True`. A job whose id APScheduler generated (a different one in each replica)
is refused the same way: give `add_job` an `id`.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

try:
    from apscheduler.events import (
        EVENT_JOB_ERROR,
        EVENT_JOB_EXECUTED,
        EVENT_JOB_MISSED,
        JobExecutionEvent,
    )
    from apscheduler.executors import pool
except ImportError as exc:  # not installed, or APScheduler 4 (another API)
    raise ImportError(
        f"safebeat.contrib.apscheduler needs APScheduler 3 ({exc}); "
        "install it with: pip install 'safebeat[apscheduler]'"
    ) from exc

from safebeat.config import Config, load_config
from safebeat.current import CurrentWindow, running
from safebeat.errors import ConfigError, SafebeatError
from safebeat.identity import format_window
from safebeat.limits import LimitError, check_name
from safebeat.records import Claim, Outcome, RunEnd
from safebeat.runners import direct as local_runs
from safebeat.stores.per_process import store_for
from safebeat.stores.protocols import Store

logger = logging.getLogger("safebeat.apscheduler")

REASON = "apscheduler"
#: The id APScheduler gives a job added without one: `uuid4().hex`, new in every process.
_GENERATED_ID = re.compile(r"^[0-9a-f]{32}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class JobRefused(SafebeatError):
    """A run time was not run because it could not be claimed (the message says why)."""


@dataclass(frozen=True)
class Guard:
    """What the executor's workers need to claim run times: picklable for process pools."""

    config: Config
    fail_open: bool = False


def guard_for(settings: Mapping[str, Any] | Config | None, fail_open: object) -> Guard:
    """Read an executor's settings (ConfigError names a bad one)."""
    config = settings if isinstance(settings, Config) else load_config(settings or {})
    if isinstance(fail_open, str) and fail_open.strip().lower() in _TRUE | _FALSE:
        fail_open = fail_open.strip().lower() in _TRUE
    if not isinstance(fail_open, bool):
        raise ConfigError(f"fail_open={fail_open!r}: expected true or false")
    return Guard(config, fail_open)


class _Claiming:
    """What both executors add to APScheduler's pool executor (next in the MRO): the guard
    made of `settings` and `fail_open`, and the claim before each run."""

    def __init__(
        self,
        max_workers: int = 10,
        pool_kwargs: Mapping[str, Any] | None = None,
        *,
        settings: Mapping[str, Any] | Config | None = None,
        fail_open: bool = False,
    ) -> None:
        self.guard = guard_for(settings, fail_open)
        super().__init__(max_workers, pool_kwargs)  # type: ignore[call-arg] # the pool executor

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        _submit(self, job, run_times)


class ThreadPoolExecutor(_Claiming, pool.ThreadPoolExecutor):  # type: ignore[misc] # untyped base
    """APScheduler's `ThreadPoolExecutor`, claiming each run time before running it."""


class ProcessPoolExecutor(_Claiming, pool.ProcessPoolExecutor):  # type: ignore[misc] # untyped base
    """APScheduler's `ProcessPoolExecutor`, claiming each run time (in the pool's process)."""

    _pool: Any

    def _do_submit_job(self, job: Any, run_times: list[datetime]) -> None:
        try:
            _submit(self, job, run_times)
        except BrokenProcessPool:
            self._logger.warning("Process pool is broken; replacing pool with a fresh instance")
            self._pool = self._pool.__class__(self._pool._max_workers, **self.pool_kwargs)
            _submit(self, job, run_times)


def _submit(executor: Any, job: Any, run_times: list[datetime]) -> None:
    """Hand the run times to the pool, as APScheduler's pool executors do, with our run_job."""

    def done(future: concurrent.futures.Future[list[Any]]) -> None:
        exc = future.exception()
        if exc is not None:
            executor._run_job_error(job.id, exc, exc.__traceback__)
        else:
            executor._run_job_success(job.id, future.result())

    future = executor._pool.submit(
        run_job, executor.guard, job, job._jobstore_alias, run_times, executor._logger.name
    )
    future.add_done_callback(done)


def run_job(
    guard: Guard, job: Any, jobstore_alias: str, run_times: list[datetime], logger_name: str
) -> list[Any]:
    """APScheduler's `run_job` with a claim before each run; return the events to dispatch.

    Missed run times and the job's own outcome produce the events APScheduler's would;
    a run time claimed elsewhere produces none; one that cannot be claimed, an
    EVENT_JOB_ERROR (unless `guard.fail_open`, which runs it untracked).
    """
    events: list[Any] = []
    job_logger = logging.getLogger(logger_name)
    for run_time in run_times:
        if job.misfire_grace_time is not None:
            difference = datetime.now(timezone.utc) - run_time
            if difference > timedelta(seconds=job.misfire_grace_time):
                events.append(JobExecutionEvent(EVENT_JOB_MISSED, job.id, jobstore_alias, run_time))
                job_logger.warning('Run time of job "%s" was missed by %s', job, difference)
                continue
        window = run_time.astimezone(timezone.utc)
        try:
            claim = _claim(guard, job, window)
        except JobRefused as exc:
            job_logger.error('Job "%s" not run for %s: %s', job, format_window(window), exc)
            events.append(
                JobExecutionEvent(EVENT_JOB_ERROR, job.id, jobstore_alias, run_time, exception=exc)
            )
            continue
        if claim is False:
            job_logger.info(
                'Run time %s of job "%s" was claimed by another replica; not running it here',
                format_window(window),
                job,
            )
            continue
        events.append(
            _run(guard, job, claim, alias=jobstore_alias, run_time=run_time, job_logger=job_logger)
        )
    return events


def _claim(guard: Guard, job: Any, window: datetime) -> Claim | bool:
    """Claim the run time: the claim, False if another replica has it, or True to run it
    untracked (fail open). Raises JobRefused."""
    if _GENERATED_ID.match(job.id):
        raise JobRefused(
            f"its id {job.id!r} was generated by APScheduler, a different one in each "
            "replica, so its runs cannot be claimed across replicas; give add_job an id"
        )
    try:  # a name no store holds is the job's fault, not the store's: never run untracked
        check_name(job.id, "job id")
    except LimitError as exc:
        raise JobRefused(f"{exc}; not running it") from None
    if window.microsecond:
        _warn_unaligned(job, window)
    config = guard.config
    try:
        store = store_for(config)
        _register(store, config.namespace, job)
        claim = local_runs.claim(
            store, config.namespace, job.id, window, reason=REASON, task_name=_func_name(job)
        )
    except SafebeatError as exc:
        if not guard.fail_open:
            raise JobRefused(f"cannot claim it ({exc}); not running it (fail closed)") from exc
        logger.warning(
            'safebeat: cannot claim run time %s of job "%s" (%s); running it untracked '
            "(fail_open: other replicas may run it too)",
            format_window(window),
            job.id,
            exc,
        )
        return True
    return False if claim is None else claim


def _run(
    guard: Guard,
    job: Any,
    claim: Claim | bool,
    *,
    alias: str,
    run_time: datetime,
    job_logger: logging.Logger,
) -> Any:
    """Run the job for one claimed run time (as APScheduler does), recording its outcome."""
    config = guard.config
    window = run_time.astimezone(timezone.utc)
    worker = f"{socket.gethostname()}:{os.getpid()}"
    store = _started(config, claim, worker=worker)
    job_logger.info('Running job "%s" (scheduled at %s)', job, run_time)
    began = time.monotonic()
    try:
        zone = run_time.tzinfo or timezone.utc
        with running(CurrentWindow(job.id, window, zone), config):
            retval = job.func(*job.args, **job.kwargs)
    except BaseException:
        exc, tb = sys.exc_info()[1:]
        _finished(
            config,
            store,
            claim,
            worker=worker,
            outcome=Outcome.FAILURE,
            began=began,
            detail=f"{type(exc).__name__}: {exc}",
        )
        formatted = "".join(traceback.format_tb(tb))
        job_logger.exception('Job "%s" raised an exception', job)
        if tb is not None:
            traceback.clear_frames(tb)  # no cyclic references through the frames
        del tb
        return JobExecutionEvent(
            EVENT_JOB_ERROR, job.id, alias, run_time, exception=exc, traceback=formatted
        )
    _finished(config, store, claim, worker=worker, outcome=Outcome.SUCCESS, began=began)
    job_logger.info('Job "%s" executed successfully', job)
    return JobExecutionEvent(EVENT_JOB_EXECUTED, job.id, alias, run_time, retval=retval)


def _started(config: Config, claim: Claim | bool, *, worker: str) -> Store | None:
    if not isinstance(claim, Claim):
        return None
    try:
        store = store_for(config)
        local_runs.started(store, config.namespace, claim, worker=worker)
    except SafebeatError as exc:
        logger.warning("safebeat: could not record the start of %s (%s)", claim.entry, exc)
        return None
    return store


def _finished(
    config: Config,
    store: Store | None,
    claim: Claim | bool,
    *,
    worker: str,
    outcome: Outcome,
    began: float,
    detail: str | None = None,
) -> None:
    if store is None or not isinstance(claim, Claim):
        return
    runtime = timedelta(seconds=time.monotonic() - began)
    try:
        local_runs.finished(
            store, config.namespace, claim, worker=worker, end=RunEnd(outcome, runtime, detail)
        )
    except SafebeatError as exc:
        logger.warning("safebeat: could not record the end of %s (%s)", claim.entry, exc)


def _func_name(job: Any) -> str:
    return str(job.func_ref or getattr(job.func, "__qualname__", "job"))


# --- once per process and job -----------------------------------------------------------

_mutex = threading.Lock()
_registered: set[tuple[str, str, str, str]] = set()
_warned: set[str] = set()


def _register(store: Store, namespace: str, job: Any) -> None:
    """Record the job's definition once per process, so `safebeat status` lists it."""
    schedule = f"apscheduler {job.trigger}"
    key = (store.display_url, namespace, job.id, schedule)
    with _mutex:
        if key in _registered:
            return
    registration = local_runs.register(store, namespace, job.id, schedule, [_func_name(job)])
    if job.id in registration.changed:
        logger.warning(
            "safebeat: job %r had another definition in namespace %r (a rolling deploy, or "
            "replicas that schedule it differently?); the claim still runs it once per run time",
            job.id,
            namespace,
        )
    with _mutex:
        _registered.add(key)


def _warn_unaligned(job: Any, window: datetime) -> None:
    with _mutex:
        if job.id in _warned:
            return
        _warned.add(job.id)
    logger.warning(
        "safebeat: run time %s of job %r has a fraction of a second: its trigger probably "
        "counts from when this process added the job (an interval trigger without "
        "start_date, a date trigger at now(), or jitter), so each replica has run times of "
        "its own and each runs them; give the trigger a fixed start_date",
        format_window(window),
        job.id,
    )
