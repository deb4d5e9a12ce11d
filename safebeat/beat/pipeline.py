"""One publish running on a thread of its own, so that beat claims the next round on the
store while the broker takes this round's messages.

The thread touches only the broker (kombu's connection and producer are used by it alone
while it runs); every store call stays on the calling thread. It runs in a copy of the
caller's context, so the tick's trace span stays the parent of its publishes.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BackgroundPublish(Generic[T]):
    """`work(stop)` started on a daemon thread; `result()` waits for it. `stop` turns true
    once the caller asked the work to stop early (`result(stop=True)`)."""

    def __init__(self, work: Callable[[Callable[[], bool]], T]) -> None:
        self._stopping = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run, work), name="safebeat-publish", daemon=True
        )
        self._thread.start()

    def _run(self, work: Callable[[Callable[[], bool]], T]) -> None:
        try:
            self._value = work(self._stopping.is_set)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self._error = exc

    def result(self, *, stop: bool = False) -> T:
        """Wait for the work and return what it returned (or raise what it raised); with
        `stop`, ask it to stop at its next check first."""
        if stop:
            self._stopping.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class PublishedAlready(Generic[T]):
    """`work` run at once on the calling thread, behind `BackgroundPublish`'s interface."""

    def __init__(self, work: Callable[[Callable[[], bool]], T]) -> None:
        self._value = work(lambda: False)

    def result(self, *, stop: bool = False) -> T:
        return self._value
