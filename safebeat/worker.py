"""The worker hook: each window's execution recorded, duplicate deliveries skipped.

Turn it on once, where the Celery app is created, so that beat and workers share it:

    app = Celery("proj")
    safebeat.worker.install(app)

For every task that safebeat sent (it carries the `safebeat_entry` and `safebeat_window`
headers), the hook asks the store before the task body runs (`Store.start_execution`):

- the window's first delivery, or a Celery retry of it: the body runs, and the dispatch
  row records when it started, on which worker, and (afterwards) when it finished, how
  (success, failure, retry) and for how long;
- while the body runs, its lease on the row is renewed (`safebeat.leases`): every
  `safebeat_execution_lease / 3` a daemon thread of the worker process extends it to
  store now + `safebeat_execution_lease`, for all runs of the process in one call;
- a delivery of a window whose run is alive (its lease has not expired) is deferred: the
  same message (same task id, same headers) is sent again with a countdown of one lease
  and this delivery is skipped, so a copy still exists if the live run dies;
- a delivery of a window whose run's lease expired without a finish takes it over: that
  run died with its worker (whatever the pool, whatever its time limits);
- a delivery of a window whose run finished is the only one skipped as a duplicate: the
  message is acknowledged, and the duplicate counted on the row and logged;
- for an entry with `overlap="forbid"` (the `safebeat_overlap` header), a delivery that
  would start while another window of the entry runs with a live lease is deferred too,
  so two windows of the entry never run at once, however the broker orders them;
- a task that raises `Reject(requeue=True)` did not run: its lease is ended at once, so
  the requeued copy runs.

Tasks without safebeat's headers, and eager calls, are left alone. It works with the
prefork, threads and solo pools: each process (and thread) opens its own store.

If the store cannot be reached, the hook fails open: the task runs untracked, a warning
is logged, and the store is left alone for a short backoff. Duplicate skipping is a
second line of defence; losing a run because the store blinked would be worse than a
rare duplicate, which idempotent effects (`safebeat.claim`) absorb.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery import signals, states
from celery.exceptions import Ignore, Reject, TimeLimitExceeded, WorkerLostError

from safebeat import failures
from safebeat import signals as safebeat_signals
from safebeat.backoff import Backoff
from safebeat.contrib import opentelemetry
from safebeat.current import CurrentWindow, window_of
from safebeat.errors import SafebeatError
from safebeat.identity import (
    ENTRY_HEADER,
    OVERLAP_HEADER,
    PERIODIC_TASK_HEADER,
    WINDOW_HEADER,
    format_window,
    task_id_for,
)
from safebeat.leases import renewer
from safebeat.local_store import config_of, store_of
from safebeat.records import LeasedRun, Outcome, Start
from safebeat.worker_metrics import child_exited, pool_name
from safebeat.worker_metrics import metrics as worker_metrics

logger = logging.getLogger("safebeat.worker")

#: What the hook did in this process: the always-kept totals of its metrics.
stats = worker_metrics.totals

#: Marks the `before_start` safebeat installed on a task class.
_GUARD_MARK = "_safebeat_guard"
_OUTCOMES = {
    states.SUCCESS: Outcome.SUCCESS,
    states.RETRY: Outcome.RETRY,
    # A task that raises Ignore itself (Task.replace does) has done what it had to.
    states.IGNORED: Outcome.SUCCESS,
}


#: The headers beat sends with a window, which a deferred copy must carry too.
_CARRIED_HEADERS = (
    ENTRY_HEADER,
    WINDOW_HEADER,
    PERIODIC_TASK_HEADER,
    OVERLAP_HEADER,
    "celery_beat_task",
)

_installed: weakref.WeakSet[Any] = weakref.WeakSet()
_install_mutex = threading.Lock()
_signals_connected = False


def install(app: Any) -> None:
    """Turn the hook on for `app`: call it once, where the app is created. Idempotent.

    It connects to Celery's signals and gives each task class of the app a `before_start`
    that checks the delivery first (calling the task's own `before_start` after it).
    Tasks registered later are covered when the app is finalized and when a worker
    starts, before any task runs.
    """
    global _signals_connected  # noqa: PLW0603 - Celery's signals are process-wide
    with _install_mutex:
        if app in _installed:
            return
        _installed.add(app)
        app.on_after_finalize.connect(_guard_tasks, weak=False)
        if not _signals_connected:
            signals.worker_init.connect(_on_worker_init, weak=False)
            signals.worker_process_shutdown.connect(_on_child_shutdown, weak=False)
            signals.worker_process_init.connect(_on_worker_process_init, weak=False)
            signals.task_prerun.connect(_on_prerun, weak=False)
            signals.task_postrun.connect(_on_postrun, weak=False)
            signals.task_received.connect(_on_received, weak=False)
            signals.task_failure.connect(_on_failure, weak=False)
            _signals_connected = True
    _guard_tasks(app)


def installed(app: Any) -> bool:
    """Whether `install(app)` was called in this process."""
    return app in _installed


# --- putting the guard on every task class ----------------------------------------------


def _guard_tasks(sender: Any, **_: Any) -> list[Any]:
    """Give every task registered on `sender` (an app) the guard; return the newly guarded.

    Reads the registry without finalizing the app, so calling this early changes nothing.
    """
    guarded = []
    # `sender.tasks` would finalize the app; the registry itself does not.
    for task in list(sender._tasks.values()):
        cls = type(task)
        if not getattr(cls.before_start, _GUARD_MARK, False):
            cls.before_start = _guard(cls.before_start)
            guarded.append(task)
    return guarded


def _guard(original: Callable[..., Any]) -> Callable[..., Any]:
    def before_start(task: Any, task_id: str, args: Any, kwargs: Any) -> Any:
        _check_delivery(task)
        return original(task, task_id, args, kwargs)

    setattr(before_start, _GUARD_MARK, True)
    before_start.__doc__ = original.__doc__
    return before_start


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    # After the task modules are imported, before the pool forks and tracers are built.
    app = getattr(sender, "app", None)
    if app is not None and app in _installed:
        _guard_tasks(app)
        _serve_metrics(app, sender)


def _serve_metrics(app: Any, worker: Any) -> None:
    try:
        port = config_of(app).worker_metrics_port
    except SafebeatError:
        return  # reported when a task first needs the settings
    if port is None:
        return
    try:
        worker_metrics.serve(port, pool=pool_name(worker))
    except OSError as exc:
        logger.error("safebeat: cannot serve worker metrics on port %d (%s)", port, exc)


def _on_child_shutdown(pid: int | None = None, **_: Any) -> None:
    child_exited(pid or os.getpid())


def _on_worker_process_init(sender: Any = None, **_: Any) -> None:
    # A pool child started as a fresh interpreter (spawn) built its tracers before this
    # signal: rebuild those of tasks that were not guarded yet.
    from celery.app.trace import build_tracer  # noqa: PLC0415 - worker-only import

    for app in list(_installed):
        for task in _guard_tasks(app):
            hostname = sender if isinstance(sender, str) else None
            task.__trace__ = build_tracer(task.name, task, app.loader, hostname, app=app)


# --- one delivery -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Execution:
    """A started execution, kept on the Celery request until the task returns."""

    window: CurrentWindow
    worker: str
    retries: int
    started: float
    lease: int  # the renewer's token for this run (safebeat.leases)
    start: Start = Start.RUN  # the store's verdict: run, or take over


def _check_delivery(task: Any) -> None:
    """Record the start of this delivery's window, or raise Ignore to skip a duplicate."""
    request = task.request
    if getattr(request, "_safebeat_checked", False):
        return  # a task's own before_start called ours again through super()
    request._safebeat_checked = True
    if request.is_eager or task.app not in _installed:
        return
    window = window_of(request)
    if window is None:
        return
    try:
        execution = begin(task, request, window)
    except Ignore:
        deferred = getattr(request, "_safebeat_deferred", False)
        _annotate(window, (Start.DEFER if deferred else Start.DUPLICATE).value)
        raise
    except Reject:
        raise
    except Exception:  # a bug here must not fail the user's task (logged with its traceback)
        logger.exception("safebeat: checking task %s failed; it runs untracked", request.id)
        _untracked(task, window)
        return
    if execution is not None:
        request._safebeat_execution = execution
    _annotate(window, None if execution is None else execution.start.value)


def _annotate(window: CurrentWindow, delivery: str | None) -> None:
    """Put the window on the task's trace span (OpenTelemetry, when the app uses it)."""
    try:
        opentelemetry.annotate_task_span(window.entry, format_window(window.window), delivery)
    except Exception:  # tracing must never fail the task (logged)
        logger.exception("safebeat: annotating the task's span failed")


def begin(task: Any, request: Any, window: CurrentWindow) -> _Execution | None:
    """Ask the store whether this delivery runs; return its execution, None if untracked.

    Raises Ignore for a duplicate, and for a deferred delivery once its copy is sent
    again: Celery then acknowledges the message without running the body and without
    storing a result. Raises Reject(requeue=True) for a deferred delivery whose copy
    could not be sent, so the broker keeps it.
    """
    if not _backoff.ready():
        _untracked(task, window)
        return None
    try:
        config, store = store_of(task.app)
        expected = task_id_for(config.namespace, window.entry, window.window)
        if request.id != expected:
            _warn_once(
                ("namespace", window.entry),
                "safebeat: task %s of entry %r has an id other than the one namespace %r gives "
                "its window (is safebeat_namespace the same for beat and this worker?); it "
                "runs untracked",
                request.id,
                window.entry,
                config.namespace,
            )
            _untracked(task, window)
            return None
        worker = f"{request.hostname or socket.gethostname()}:{os.getpid()}"
        retries = int(request.retries or 0)
        verdict = store.start_execution(
            config.namespace,
            window.entry,
            window.window,
            worker=worker,
            retries=retries,
            lease=config.execution_lease,
            exclusive=_header(request, OVERLAP_HEADER) == "forbid",
        )
    except SafebeatError as exc:  # the store is down, or its settings are wrong: fail open
        _backoff.failed(exc)
        _untracked(task, window)
        return None
    _backoff.succeeded()
    where = f"entry {window.entry!r} window {format_window(window.window)}"
    if verdict is Start.DUPLICATE:
        worker_metrics.duplicate(config.namespace, window.entry)
        logger.warning(
            "safebeat: duplicate delivery of %s skipped (task %s, retry %d): that window's "
            "run already finished",
            where,
            request.id,
            retries,
        )
        safebeat_signals.send(
            safebeat_signals.execution_duplicate,
            task,
            namespace=config.namespace,
            entry=window.entry,
            window=window.window,
            task_id=request.id,
            retries=retries,
        )
        raise Ignore()
    if verdict is Start.DEFER:
        worker_metrics.deferred(config.namespace, window.entry)
        _defer(task, request, where, config.execution_lease)
    if verdict is Start.UNKNOWN:
        _warn_once(
            ("unknown", window.entry),
            "safebeat: %s has no dispatch row in the store (pruned, or sent by hand?); "
            "it runs untracked",
            where,
        )
        _untracked(task, window)
        return None
    worker_metrics.started(config.namespace, window.entry, takeover=verdict is Start.TAKEOVER)
    if verdict is Start.TAKEOVER:
        logger.warning(
            "safebeat: the run of %s stopped renewing its lease without finishing (its "
            "worker died); this delivery (task %s) runs it again",
            where,
            request.id,
        )
        safebeat_signals.send(
            safebeat_signals.execution_taken_over,
            task,
            namespace=config.namespace,
            entry=window.entry,
            window=window.window,
            task_id=request.id,
            retries=retries,
            lease=config.execution_lease,
        )
    token = renewer.hold(config, LeasedRun(window.entry, window.window, worker, retries))
    return _Execution(window, worker, retries, time.monotonic(), token, verdict)


def _header(request: Any, name: str) -> object:
    headers = getattr(request, "headers", None)
    found = headers.get(name) if isinstance(headers, dict) else None
    return found if found is not None else getattr(request, name, None)


def _defer(task: Any, request: Any, where: str, lease: timedelta) -> None:
    """Send this delivery again (same id, same headers) one lease from now, then skip it.

    A re-sent copy, not `Reject(requeue=True)`: a requeued message comes straight back
    and would spin between the workers for as long as the live run lasts; the copy waits
    one lease, by which time the run finished (the copy is then a duplicate) or its
    lease expired (the copy takes it over).
    """
    headers = dict(getattr(request, "headers", None) or {})
    # Celery keeps a message's custom headers as attributes of the request: carry them over.
    for name in _CARRIED_HEADERS:
        value = _header(request, name)
        if value is not None:
            headers[name] = value
    try:
        task.signature_from_request(
            request, countdown=lease.total_seconds(), headers=headers
        ).apply_async()
    except Exception as exc:  # the broker is down: keep this delivery instead (logged)
        logger.warning(
            "safebeat: %s runs elsewhere; sending this delivery (task %s) again for later "
            "failed (%s), so it goes back to the broker",
            where,
            request.id,
            exc,
        )
        raise Reject(str(exc), requeue=True) from exc
    logger.info(
        "safebeat: %s is running elsewhere (its lease is alive); this delivery (task %s) "
        "is sent again to look in %s",
        where,
        request.id,
        lease,
    )
    request._safebeat_deferred = True
    raise Ignore()


def _untracked(task: Any, window: CurrentWindow) -> None:
    try:
        namespace = config_of(task.app).namespace
    except SafebeatError:
        namespace = None
    worker_metrics.untracked(namespace, window.entry)


def _on_prerun(sender: Any = None, task: Any = None, **_: Any) -> None:
    """Say so, once per task, when a safebeat task runs without the guard on its class."""
    task = task or sender
    if task is None or task.app not in _installed or task.request.is_eager:
        return
    if getattr(type(task).before_start, _GUARD_MARK, False) or window_of(task.request) is None:
        return
    _warn_once(
        ("unguarded", task.name),
        "safebeat: task %s was registered after the worker started, so duplicate "
        "deliveries of it are not skipped; import it with the other task modules",
        task.name,
        level=logging.ERROR,
    )


def _on_postrun(
    sender: Any = None,
    task: Any = None,
    state: str | None = None,
    retval: Any = None,
    **_: Any,
) -> None:
    task = task or sender
    execution = getattr(getattr(task, "request", None), "_safebeat_execution", None)
    if not isinstance(execution, _Execution):
        return
    if state == states.REJECTED and getattr(retval, "requeue", False):
        not_run(task, execution)
        return
    finish(task, execution, _OUTCOMES.get(state or "", Outcome.FAILURE))


def not_run(task: Any, execution: _Execution) -> None:
    """A run that gave its message back to the broker (`Reject(requeue=True)`): end its
    lease now, so the requeued copy takes the window over at once."""
    renewer.release(execution.lease)
    run = LeasedRun(
        execution.window.entry, execution.window.window, execution.worker, execution.retries
    )
    try:
        config, store = store_of(task.app)
        store.renew_executions(config.namespace, [run], lease=timedelta(0))
    except SafebeatError as exc:  # the lease lapses by itself within one lease
        _backoff.failed(exc)


def finish(task: Any, execution: _Execution, outcome: Outcome) -> None:
    """Record how the execution ended; a store that is down only costs the record."""
    renewer.release(execution.lease)
    runtime = timedelta(seconds=time.monotonic() - execution.started)
    try:
        namespace = config_of(task.app).namespace
    except SafebeatError:
        namespace = None
    if namespace is not None:
        worker_metrics.finished(
            namespace, execution.window.entry, outcome.value, runtime.total_seconds()
        )
    try:
        config, store = store_of(task.app)
        store.finish_execution(
            config.namespace,
            execution.window.entry,
            execution.window.window,
            worker=execution.worker,
            retries=execution.retries,
            outcome=outcome,
            runtime=runtime,
        )
        threshold = failures.threshold_of(task.request)
        if outcome is Outcome.FAILURE and threshold is not None:
            entry = execution.window.entry
            if failures.pause_if_failing(store, config.namespace, entry, threshold):
                worker_metrics.paused_after_failures(config.namespace, entry)
    except SafebeatError as exc:
        _backoff.failed(exc)
    except Exception:  # the task has run; only the record is lost (logged)
        logger.exception("safebeat: recording the end of task %s failed", task.request.id)


# --- a pool child lost, as the worker's main process sees it ---------------------------

#: The requests of safebeat windows this (main) process handed to its pool, by task id,
#: while the pool runs them; a finished request is dropped with it.
_received: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def _on_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    task = getattr(request, "task", None)
    if task is None or task.app not in _installed:
        return
    if window_of(_Headers(request.request_dict)) is not None:
        _received[request.id] = request


@dataclass(frozen=True)
class _Headers:
    headers: dict[str, Any]


def _on_failure(
    sender: Any = None, task_id: str | None = None, exception: object = None, **_: Any
) -> None:
    """Record a run whose pool child died (WorkerLostError) or was killed at its hard time
    limit (TimeLimitExceeded): Celery reports both in the worker's main process only."""
    if not isinstance(exception, WorkerLostError | TimeLimitExceeded) or task_id is None:
        return
    request = _received.pop(task_id, None)
    if request is None or request.worker_pid is None:
        return
    window = window_of(_Headers(request.request_dict))
    if window is None:
        return
    run = LeasedRun(
        window.entry,
        window.window,
        f"{request.hostname}:{request.worker_pid}",
        int(request.request_dict.get("retries") or 0),
    )
    try:
        lost(request.task.app, run, exception)
    except SafebeatError as exc:  # the lease lapses by itself within one lease
        _backoff.failed(exc)


def lost(app: Any, run: LeasedRun, exception: object) -> None:
    """A run whose pool child died: a hard time limit is a failure, recorded as finished
    (running it again would meet the same limit); any other death frees the window at
    once (its lease ends), for the requeued copy or beat's re-publish to take it over."""
    config, store = store_of(app)
    if isinstance(exception, TimeLimitExceeded):
        store.finish_execution(
            config.namespace,
            run.entry,
            run.window,
            worker=run.worker,
            retries=run.retries,
            outcome=Outcome.FAILURE,
            runtime=timedelta(0),
            detail=f"the pool killed the run at its hard time limit ({_limit(exception)} s)",
        )
    else:
        store.renew_executions(config.namespace, [run], lease=timedelta(0))
    logger.warning(
        "safebeat: the pool child running entry %r window %s was lost (%s); %s",
        run.entry,
        format_window(run.window),
        type(exception).__name__,
        "recorded as failed"
        if isinstance(exception, TimeLimitExceeded)
        else "its window is free to run again",
    )


def _limit(exception: TimeLimitExceeded) -> object:
    return exception.args[0] if exception.args else "?"


# --- store trouble ------------------------------------------------------------------------


class _StoreBackoff:
    """After a store error, leave the store alone for a while (see safebeat.backoff).

    Shared by the threads of a process, hence the lock.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._backoff = Backoff()

    def ready(self) -> bool:
        return not self._backoff.waiting(time.monotonic())

    def failed(self, exc: Exception) -> None:
        with self._mutex:
            delay = self._backoff.failed(time.monotonic())
        worker_metrics.store_error()
        logger.warning(
            "safebeat: store error (%s); tasks run untracked (duplicates are not skipped) "
            "for the next %.0fs",
            exc,
            delay,
        )

    def succeeded(self) -> None:
        if self._backoff.failures:
            with self._mutex:
                self._backoff.succeeded()
            logger.info("safebeat: store reachable again; tracking executions")


_backoff = _StoreBackoff()
_warned: set[tuple[str, str]] = set()


def _warn_once(
    key: tuple[str, str], message: str, *args: Any, level: int = logging.WARNING
) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.log(level, message, *args)
