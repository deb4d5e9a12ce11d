"""safebeat's own signals: what beat and the worker hook decided, for plugins to receive.

Each is a Celery `Signal` (`celery.utils.dispatch.Signal`), connected to the way Celery's
own are (`@window_claimed.connect`). They are sent after the store has returned, never
inside its transaction or under the tick lock, and a receiver that raises is logged
(with its traceback) and changes nothing else: the tick or the task goes on. See
docs/signals.md for the arguments of each.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.utils.dispatch import Signal

logger = logging.getLogger("safebeat.signals")

#: A window was claimed by this replica, before it is published. Sender: the scheduler.
#: Arguments: namespace, entry, window, task_id, replica.
window_claimed = Signal(name="safebeat.window_claimed")

#: Windows of an entry were decided and not dispatched. Sender: the scheduler.
#: Arguments: namespace, entry, window (the last one), first, count (None: too many to
#: count), reason (`missed`, `late`, `catchup_limit`, `calendar`, `overlap`, `paused`),
#: replica.
window_skipped = Signal(name="safebeat.window_skipped")

#: A claim left unsent past `safebeat_claim_timeout` was taken over by this replica, to be
#: published again with the same task id. Sender: the scheduler.
#: Arguments: namespace, entry, window, task_id, attempts, replica.
window_republished = Signal(name="safebeat.window_republished")

#: A tick failed: the store could not be reached or answered with an error, or something
#: unexpected was raised. Nothing was claimed. Sender: the scheduler.
#: Arguments: exception, reason (`store unreachable`, `store error`, `unexpected error`),
#: retry_in (seconds until beat tries again).
tick_failed = Signal(name="safebeat.tick_failed")

#: A worker skipped a delivery of a window that already started or finished. Sender: the
#: task. Arguments: namespace, entry, window, task_id, retries.
execution_duplicate = Signal(name="safebeat.execution_duplicate")

#: A worker took over a window whose run started and never finished (its lease expired):
#: this delivery runs it again. Sender: the task.
#: Arguments: namespace, entry, window, task_id, retries, lease.
execution_taken_over = Signal(name="safebeat.execution_taken_over")

#: A delivery of a window starts its run, once the worker hook decided it runs (a first
#: run, a Celery retry, or a takeover): the body runs next. Sender: the task.
#: Arguments: namespace, entry, window, task_id, retries, start (`run` or `takeover`).
execution_started = Signal(name="safebeat.execution_started")

#: A run that sent `execution_started` returned. Sender: the task.
#: Arguments: namespace, entry, window, task_id, retries, start, outcome (`success`,
#: `failure` or `retry`), duration (a `timedelta`).
execution_finished = Signal(name="safebeat.execution_finished")

ALL = (
    window_claimed,
    window_skipped,
    window_republished,
    tick_failed,
    execution_duplicate,
    execution_taken_over,
    execution_started,
    execution_finished,
)


def send(signal: Signal, sender: Any, **arguments: Any) -> None:
    """Send `signal` to its receivers; a receiver that raises is logged, never propagated.

    Celery's `Signal.send` already catches and logs what a receiver raises; this also
    guards against anything raised by the dispatch itself, so no signal can break a tick
    or a task.
    """
    if not signal.receivers:
        return
    try:
        signal.send(sender=sender, **arguments)
    except Exception:  # a plugin must never break beat or a task (logged)
        logger.exception("safebeat: sending signal %s failed; carrying on", signal.name)
