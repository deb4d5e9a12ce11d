"""The worker hook: each window's execution recorded, duplicate deliveries skipped.

Turn it on once, where the Celery app is created, so that beat and workers share it:

    app = Celery("proj")
    safebeat.worker.install(app)

For every task that safebeat sent (it carries the `safebeat_entry` and `safebeat_window`
headers), the hook asks the store before the task body runs (`Store.start_execution`):

- the window's first delivery, or the Celery retry its last run ended asking for: the
  body runs, and the dispatch row records when it started, on which worker, and
  (afterwards) when it finished, how (success, failure, retry) and for how long;
- while the body runs, its lease on the row is renewed (`safebeat.worker.leases`): every
  `safebeat_execution_lease / 3` a daemon thread of the worker process extends it to
  store now + `safebeat_execution_lease`, for all runs of the process in one call;
- a delivery of a window whose run is alive (its lease has not expired) is deferred,
  whatever its retry number: the same message (same task id, same headers) is sent
  again with a countdown of a third of the lease and this delivery is skipped, so a copy
  still exists if the live run dies, and takes it over soon after its lease lapsed;
- a delivery of a window whose run's lease expired without a finish takes it over: that
  run died with its worker (whatever the pool, whatever its time limits);
- a delivery of a window whose run finished (other than the retry it asked for) is the
  only one skipped as a duplicate: the message is acknowledged, and the duplicate
  counted on the row and logged;
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

This module puts the hook in place (Celery's signals, the guard on each task class);
what one delivery does is `safebeat.worker.delivery`, and a pool child lost while it ran
a window is `safebeat.worker.pool`.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from celery import signals

from safebeat.current import window_of
from safebeat.errors import SafebeatError
from safebeat.stores.per_process import config_of
from safebeat.worker import pool as worker_pool

# Names this module has always offered, now kept where their job is.
from safebeat.worker.delivery import (  # noqa: F401
    Execution,
    begin,
    check_delivery,
    ended,
    finish,
    not_run,
    warn_once,
)
from safebeat.worker.metrics import child_exited, pool_name
from safebeat.worker.metrics import metrics as worker_metrics
from safebeat.worker.pool import lost  # noqa: F401

logger = logging.getLogger("safebeat.worker")

#: What the hook did in this process: the always-kept totals of its metrics.
stats = worker_metrics.totals

#: Marks the `before_start` safebeat installed on a task class.
_GUARD_MARK = "_safebeat_guard"


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
        check_delivery(task, installed=task.app in _installed)
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
        logger.error(
            "safebeat: cannot serve worker metrics on port %d (%s): set "
            "safebeat_worker_metrics_port (SAFEBEAT_WORKER_METRICS_PORT) to a free port; "
            "the worker runs on without them",
            port,
            exc,
        )


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


# --- Celery's signals, passed on to the delivery and the pool watcher ---------------------


def _on_prerun(sender: Any = None, task: Any = None, **_: Any) -> None:
    """Say so, once per task, when a safebeat task runs without the guard on its class."""
    task = task or sender
    if task is None or task.app not in _installed or task.request.is_eager:
        return
    if getattr(type(task).before_start, _GUARD_MARK, False) or window_of(task.request) is None:
        return
    warn_once(
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
    ended(task or sender, state, retval)


def _on_received(sender: Any = None, request: Any = None, **_: Any) -> None:
    task = getattr(request, "task", None)
    if task is not None and task.app in _installed:
        worker_pool.received(request)


def _on_failure(
    sender: Any = None, task_id: str | None = None, exception: object = None, **_: Any
) -> None:
    worker_pool.failed(task_id, exception)
