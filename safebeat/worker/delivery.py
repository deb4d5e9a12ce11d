"""One delivery of a safebeat window on a worker: ask the store, run or skip, record the end.

`check_delivery` runs in the task's `before_start` (see `safebeat.worker`): it asks the
store whether this delivery runs (`ExecutionStore.start_execution`), skips a duplicate,
sends a deferred delivery again for later, and holds the run's lease while the body runs
(`safebeat.worker.leases`); `finish` records how the run ended, `not_run` frees a run that gave
its message back. A store that cannot be reached makes the task run untracked, and is
left alone for a short backoff (`backoff`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery import states
from celery.exceptions import Ignore, Reject

from safebeat import signals as safebeat_signals
from safebeat.backoff import Backoff
from safebeat.current import CurrentWindow, window_of
from safebeat.errors import SafebeatError
from safebeat.identity import (
    OVERLAP_HEADER,
    WINDOW_MESSAGE_HEADERS,
    format_window,
    task_id_for,
)
from safebeat.records import LeasedRun, Outcome, RunEnd, Start
from safebeat.stores.per_process import config_of, store_of
from safebeat.stores.protocols import ExecutionStore
from safebeat.worker import announce, failures
from safebeat.worker.leases import renewal_period, renewer
from safebeat.worker.metrics import metrics as worker_metrics

logger = logging.getLogger("safebeat.worker")

#: How each Celery end state of a run is recorded (any other: a failure).
_OUTCOMES = {
    states.SUCCESS: Outcome.SUCCESS,
    states.RETRY: Outcome.RETRY,
    # A task that raises Ignore itself (Task.replace does) has done what it had to.
    states.IGNORED: Outcome.SUCCESS,
}


@dataclass(frozen=True)
class Execution:
    """A started execution, kept on the Celery request until the task returns."""

    window: CurrentWindow
    run: LeasedRun
    started: float
    lease: int  # the renewer's token for this run (safebeat.worker.leases)
    start: Start  # the store's verdict: run, or take over
    namespace: str


def check_delivery(task: Any, installed: bool) -> None:
    """Record the start of this delivery's window, or raise Ignore to skip a duplicate."""
    request = task.request
    if getattr(request, "_safebeat_checked", False):
        return  # a task's own before_start called ours again through super()
    request._safebeat_checked = True
    if request.is_eager or not installed:
        return
    window = window_of(request)
    if window is None:
        return
    try:
        execution = begin(task, request, window)
    except Ignore:
        deferred = getattr(request, "_safebeat_deferred", False)
        announce.decided(task, window, (Start.DEFER if deferred else Start.DUPLICATE).value)
        raise
    except Reject:  # a deferred delivery whose copy could not be sent: back to the broker
        announce.decided(task, window, Start.DEFER.value)
        raise
    except Exception:  # a bug here must not fail the user's task (logged with its traceback)
        logger.exception("safebeat: checking task %s failed; it runs untracked", request.id)
        untracked(task, window)
        announce.decided(task, window, "untracked")
        return
    if execution is None:
        announce.decided(task, window, "untracked")
        return
    request._safebeat_execution = execution
    announce.decided(task, window, execution.start.value)
    announce.started(task, execution.namespace, execution.run, execution.start.value)


def begin(task: Any, request: Any, window: CurrentWindow) -> Execution | None:
    """Ask the store whether this delivery runs; return its execution, None if untracked.

    Raises Ignore for a duplicate, and for a deferred delivery once its copy is sent
    again: Celery then acknowledges the message without running the body and without
    storing a result. Raises Reject(requeue=True) for a deferred delivery whose copy
    could not be sent, so the broker keeps it (acks late; with acks early the window is
    left to beat instead, see `_defer`).
    """
    if not backoff.ready():
        untracked(task, window)
        return None
    try:
        config, store = store_of(task.app)
        expected = task_id_for(config.namespace, window.entry, window.window)
        if request.id != expected:
            warn_once(
                ("namespace", window.entry),
                "safebeat: task %s of entry %r has an id other than the one namespace %r gives "
                "its window (is safebeat_namespace the same for beat and this worker?); it "
                "runs untracked",
                request.id,
                window.entry,
                config.namespace,
            )
            untracked(task, window)
            return None
        worker = f"{request.hostname or socket.gethostname()}:{os.getpid()}"
        run = LeasedRun(window.entry, window.window, worker, int(request.retries or 0))
        verdict = store.start_execution(
            config.namespace,
            run,
            lease=config.execution_lease,
            exclusive=header(request, OVERLAP_HEADER) == "forbid",
        )
    except SafebeatError as exc:  # the store is down, or its settings are wrong: fail open
        backoff.failed(exc)
        untracked(task, window)
        return None
    backoff.succeeded()
    where = f"entry {window.entry!r} window {format_window(window.window)}"
    if verdict is Start.DUPLICATE:
        worker_metrics.duplicate(config.namespace, window.entry)
        logger.warning(
            "safebeat: duplicate delivery of %s skipped (task %s, retry %d): that window's "
            "run already finished",
            where,
            request.id,
            run.retries,
        )
        announce.announce(safebeat_signals.execution_duplicate, task, config.namespace, run)
        raise Ignore()
    if verdict is Start.DEFER:
        worker_metrics.deferred(config.namespace, window.entry)
        _defer(
            task,
            request,
            where,
            config.execution_lease,
            lambda: _leave_to_beat(store, config.namespace, run),
        )
    if verdict is Start.UNKNOWN:
        warn_once(
            ("unknown", window.entry),
            "safebeat: %s has no dispatch row in the store (pruned, or sent by hand?); "
            "it runs untracked",
            where,
        )
        untracked(task, window)
        return None
    worker_metrics.started(config.namespace, window.entry, takeover=verdict is Start.TAKEOVER)
    if verdict is Start.TAKEOVER:
        logger.warning(
            "safebeat: the run of %s stopped renewing its lease without finishing (its "
            "worker died); this delivery (task %s) runs it again",
            where,
            request.id,
        )
        announce.announce(
            safebeat_signals.execution_taken_over,
            task,
            config.namespace,
            run,
            lease=config.execution_lease,
        )
    token = renewer.hold(config, run)
    return Execution(window, run, time.monotonic(), token, verdict, config.namespace)


def header(request: Any, name: str) -> object:
    headers = getattr(request, "headers", None)
    found = headers.get(name) if isinstance(headers, dict) else None
    return found if found is not None else getattr(request, name, None)


def _defer(
    task: Any, request: Any, where: str, lease: timedelta, leave_to_beat: Callable[[], bool]
) -> None:
    """Send this delivery again (same id, same headers) one renewal period (a third of
    the lease) from now, then skip it.

    A re-sent copy, not `Reject(requeue=True)`: a requeued message comes straight back
    and would spin between the workers for as long as the live run lasts. The copy waits
    a renewal period and looks again: by then the run finished (the copy is a
    duplicate), its lease lapsed (the copy takes it over), or it is still alive (sent
    again). A live run's lease ends at most one lease after its last renewal, so a dead
    run's window runs again within a renewal period of its lease lapsing, not up to a
    whole lease later.

    If the broker refuses the copy: with acks late, the delivery is rejected with
    requeue, so the broker keeps it. With acks early the message is acknowledged already
    and a requeue does nothing, so the window is left to beat (`leave_to_beat`).
    """
    headers = dict(getattr(request, "headers", None) or {})
    # Celery keeps a message's custom headers as attributes of the request: carry them over.
    for name in WINDOW_MESSAGE_HEADERS:
        value = header(request, name)
        if value is not None:
            headers[name] = value
    later = renewal_period(lease)
    try:
        task.signature_from_request(
            request, countdown=later.total_seconds(), headers=headers
        ).apply_async()
    except Exception as exc:  # the broker is down: keep this delivery instead (logged)
        if not getattr(task, "acks_late", False) and leave_to_beat():
            logger.warning(
                "safebeat: %s runs elsewhere; sending this delivery (task %s) again for "
                "later failed (%s), and its message is acknowledged already (acks early): "
                "the window is recorded as a run that died at once, which beat re-publishes "
                "with the same id at its next periodic pass",
                where,
                request.id,
                exc,
            )
            request._safebeat_deferred = True
            raise Ignore() from exc
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
        "is sent again to look in %.1fs",
        where,
        request.id,
        later.total_seconds(),
    )
    request._safebeat_deferred = True
    raise Ignore()


def _leave_to_beat(store: ExecutionStore, namespace: str, run: LeasedRun) -> bool:
    """Hand a deferred window whose message is gone (acked early, copy refused) to beat:
    record a start of it whose lease has already lapsed, a run that died at once. Beat's
    periodic pass re-publishes such a run with the same task id (as it does a dead
    worker's), once it can reach the broker; that delivery decides again (defers while
    another window of a forbid entry runs, takes the run over after). Where the window's
    own run is alive or finished, nothing is written: that run covers it, unless this
    delivery is a Celery retry that came while its previous attempt was still alive
    (`record_rules.decide_start` defers it): that retry is lost, and logged as an error. Return
    whether the store took the decision (False: it could not be reached)."""
    try:
        verdict = store.start_execution(namespace, run, lease=timedelta(0), exclusive=False)
    except SafebeatError as exc:
        logger.error(
            "safebeat: could not leave entry %r window %s to beat either (%s): it is lost",
            run.entry,
            format_window(run.window),
            exc,
        )
        return False
    if verdict is Start.DEFER and run.retries > 0:
        logger.error(
            "safebeat: retry %d of entry %r window %s came while a run of that window was "
            "alive, and its message is gone (acks early, its copy refused): if that run was "
            "its previous attempt, this retry is lost",
            run.retries,
            run.entry,
            format_window(run.window),
        )
    return True


def untracked(task: Any, window: CurrentWindow) -> None:
    try:
        namespace = config_of(task.app).namespace
    except SafebeatError:
        namespace = None
    worker_metrics.untracked(namespace, window.entry)


def ended(task: Any, state: str | None, retval: Any) -> None:
    """Record the end of the run this task's request holds, if it holds one (Celery's
    `task_postrun`): a requeued run is not one (`not_run`), any other state is its outcome."""
    execution = getattr(getattr(task, "request", None), "_safebeat_execution", None)
    if not isinstance(execution, Execution):
        return
    if state == states.REJECTED and getattr(retval, "requeue", False):
        not_run(task, execution)
        return
    finish(task, execution, _OUTCOMES.get(state or "", Outcome.FAILURE))


def not_run(task: Any, execution: Execution) -> None:
    """A run that gave its message back to the broker (`Reject(requeue=True)`): end its
    lease now, so the requeued copy takes the window over at once."""
    if not renewer.holds(execution.lease):
        return  # taken over in this process: the lease is the new run's
    renewer.release(execution.lease)
    try:
        config, store = store_of(task.app)
        store.renew_executions(config.namespace, [execution.run], lease=timedelta(0))
    except SafebeatError as exc:  # the lease lapses by itself within one lease
        backoff.failed(exc)


def finish(task: Any, execution: Execution, outcome: Outcome) -> None:
    """Record how the execution ended, then stop renewing its lease.

    The lease stops only once the end is recorded: if the store cannot record it now,
    the renewer keeps the lease alive and records the end at each of its rounds until it
    is in the store (`LeaseRenewer.finish_later`), so the finished window never looks
    dead and is never run again for a store blip at its end.
    """
    runtime = timedelta(seconds=time.monotonic() - execution.started)
    end = RunEnd(outcome, runtime)
    try:
        namespace = config_of(task.app).namespace
    except SafebeatError:
        namespace = None
    if namespace is not None:
        worker_metrics.finished(
            namespace, execution.window.entry, outcome.value, runtime.total_seconds()
        )
    announce.finished(
        task,
        execution.namespace,
        execution.run,
        start=execution.start.value,
        outcome=outcome.value,
        duration=runtime,
    )
    if not renewer.holds(execution.lease):
        # Taken over by a start of the same run in this process (see LeaseRenewer.hold):
        # the row is the new run's, which records its own end.
        return
    try:
        config, store = store_of(task.app)
        store.finish_execution(config.namespace, execution.run, end)
    except SafebeatError as exc:
        backoff.failed(exc)
        renewer.finish_later(execution.lease, end)
        logger.warning(
            "safebeat: recording the end of task %s failed (%s); its lease is renewed and "
            "the end recorded with the next renewals",
            task.request.id,
            exc,
        )
        return
    except Exception:  # the task has run; only the record is lost (logged)
        renewer.release(execution.lease)
        logger.exception("safebeat: recording the end of task %s failed", task.request.id)
        return
    renewer.release(execution.lease)
    try:
        threshold = failures.threshold_of(task.request)
        if outcome is Outcome.FAILURE and threshold is not None:
            entry = execution.window.entry
            if failures.pause_if_failing(store, config.namespace, entry, threshold):
                worker_metrics.paused_after_failures(config.namespace, entry)
    except SafebeatError as exc:
        backoff.failed(exc)
    except Exception:  # the end is recorded; only the pause check is lost (logged)
        logger.exception("safebeat: checking task %s's failures failed", task.request.id)


# --- store trouble ------------------------------------------------------------------------


class StoreBackoff:
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


backoff = StoreBackoff()
warned: set[tuple[str, str]] = set()


def warn_once(key: tuple[str, str], message: str, *args: Any, level: int = logging.WARNING) -> None:
    if key not in warned:
        warned.add(key)
        logger.log(level, message, *args)
