"""A pool child lost while it ran a safebeat window, as the worker's main process sees it.

Celery reports a pool child that died (`WorkerLostError`) or was killed at its hard time
limit (`TimeLimitExceeded`) only in the worker's main process, where the run's own
process can no longer record anything. `received` keeps the requests of safebeat
windows handed to the pool; `failed` looks the lost one up and records it (`lost`).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery.exceptions import TimeLimitExceeded, WorkerLostError

from safebeat import worker_delivery
from safebeat.current import window_of
from safebeat.errors import SafebeatError
from safebeat.identity import format_window
from safebeat.local_store import store_of
from safebeat.records import LeasedRun, Outcome, RunEnd

logger = logging.getLogger("safebeat.worker")


#: The requests of safebeat windows this (main) process handed to its pool, by task id,
#: while the pool runs them; a finished request is dropped with it.
_received: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def received(request: Any) -> None:
    """Keep `request` (a worker's, of a task of an app with the hook) while the pool runs
    it, if it carries a safebeat window."""
    if window_of(_Headers(request.request_dict)) is not None:
        _received[request.id] = request


@dataclass(frozen=True)
class _Headers:
    headers: dict[str, Any]


def failed(task_id: str | None, exception: object) -> None:
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
        worker_delivery.backoff.failed(exc)


def lost(app: Any, run: LeasedRun, exception: object) -> None:
    """A run whose pool child died: a hard time limit is a failure, recorded as finished
    (running it again would meet the same limit); any other death frees the window at
    once (its lease ends), for the requeued copy or beat's re-publish to take it over."""
    config, store = store_of(app)
    if isinstance(exception, TimeLimitExceeded):
        limit = exception.args[0] if exception.args else "?"
        detail = f"the pool killed the run at its hard time limit ({limit} s)"
        store.finish_execution(config.namespace, run, RunEnd(Outcome.FAILURE, timedelta(0), detail))
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
