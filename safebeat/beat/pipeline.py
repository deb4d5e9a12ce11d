"""One publish running on a thread of its own, so that beat claims the next round on the
store while the broker takes this round's messages.

The thread touches only the broker (kombu's connection and producer are used by it alone
while it runs); every store call stays on the calling thread. A publish runs in a copy of
the caller's context, so the tick's trace span stays the parent of its publishes.

The thread lives as long as the scheduler (`PublishThread`): starting a thread per round
waits for the new thread to get the interpreter lock from the busy one, a round at a time.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: How long `PublishThread.close` waits for a publish still running.
CLOSE_WAIT = 5.0


class PublishThread:
    """A daemon thread that runs the publishes handed to it, one after the other. It is
    started by the first publish (again after a fork, which leaves no thread behind) and
    ends with `close`."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The thread, while it runs."""
        thread = self._thread
        return thread if thread is not None and thread.is_alive() else None

    def submit(self, job: Callable[[], None]) -> None:
        if self.thread is None:
            self._jobs = queue.SimpleQueue()
            self._thread = threading.Thread(
                target=self._serve, args=(self._jobs,), name="safebeat-publish", daemon=True
            )
            self._thread.start()
        self._jobs.put(job)

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := jobs.get()) is not None:
            job()

    def start(self, work: Callable[[Callable[[], bool]], T]) -> BackgroundPublish[T]:
        """Run `work(stop)` on this thread; the returned publish's `result()` waits for it.
        (The scheduler starts every publish here, so a simulation can run them in steps.)"""
        return BackgroundPublish(work, self)

    def close(self) -> None:
        """End the thread once the publish it runs, if any, is done (waits `CLOSE_WAIT`)."""
        thread, self._thread = self.thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join(CLOSE_WAIT)


class BackgroundPublish(Generic[T]):
    """`work(stop)` run on `thread`; `result()` waits for it. `stop` turns true once the
    caller asked the work to stop early (`result(stop=True)`)."""

    def __init__(self, work: Callable[[Callable[[], bool]], T], thread: PublishThread) -> None:
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        thread.submit(lambda: context.run(self._run, work))

    def _run(self, work: Callable[[Callable[[], bool]], T]) -> None:
        try:
            self._value = work(self._stopping.is_set)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self._error = exc
        finally:
            self._done.set()

    def result(self, *, stop: bool = False) -> T:
        """Wait for the work and return what it returned (or raise what it raised); with
        `stop`, ask it to stop at its next check first."""
        if stop:
            self._stopping.set()
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


class PublishedAlready(Generic[T]):
    """`work` run at once on the calling thread, behind `BackgroundPublish`'s interface."""

    def __init__(self, work: Callable[[Callable[[], bool]], T]) -> None:
        self._value = work(lambda: False)

    def result(self, *, stop: bool = False) -> T:
        return self._value
