"""What the worker hook tells others about a delivery: safebeat's signals and its hooks.

The delivery's verdict goes to the delivery hooks (`safebeat.hooks.on_delivery`); a run that
starts sends `execution_started`, and when it returns, `execution_finished` and the run's end
hooks (`safebeat.hooks.on_run_end`). A receiver or hook that raises is logged, never raised.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from safebeat import hooks
from safebeat import signals as safebeat_signals
from safebeat.current import CurrentWindow
from safebeat.errors import SafebeatError
from safebeat.records import LeasedRun
from safebeat.stores.per_process import config_of


def announce(signal: Any, task: Any, namespace: str, run: LeasedRun, **more: object) -> None:
    """Send `signal` (see `safebeat.signals`) about the delivery of `run`'s window that
    `task` is running."""
    about = {"namespace": namespace, "entry": run.entry, "window": run.window}
    safebeat_signals.send(
        signal, task, **about, task_id=task.request.id, retries=run.retries, **more
    )


def decided(task: Any, window: CurrentWindow, verdict: str) -> None:
    """Tell the delivery hooks what this delivery of `window` does (`run`, `takeover`,
    `duplicate`, `defer` or `untracked`)."""
    if not hooks.wants_deliveries():
        return
    request = task.request
    try:
        namespace: str | None = config_of(task.app).namespace
    except SafebeatError:  # the settings are wrong: the delivery runs untracked, say so anyway
        namespace = None
    delivery = hooks.Delivery(
        task,
        namespace,
        window.entry,
        window.window,
        str(request.id),
        int(request.retries or 0),
        verdict,
    )
    hooks.delivered(delivery)


def started(task: Any, namespace: str, run: LeasedRun, start: str) -> None:
    """A tracked run of a window starts: `execution_started`."""
    announce(safebeat_signals.execution_started, task, namespace, run, start=start)


def finished(
    task: Any, namespace: str, run: LeasedRun, *, start: str, outcome: str, duration: timedelta
) -> None:
    """A tracked run's task returned: `execution_finished`, then the run's end hooks."""
    announce(
        safebeat_signals.execution_finished,
        task,
        namespace,
        run,
        start=start,
        outcome=outcome,
        duration=duration,
    )
    if hooks.wants_run_ends():
        end = hooks.RunEnd(
            task,
            namespace,
            run.entry,
            run.window,
            str(task.request.id),
            run.retries,
            start,
            outcome,
            duration,
        )
        hooks.run_ended(end)
