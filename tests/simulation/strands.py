"""Strands: real threads that run one at a time, handing control back at every gate.

The simulator runs each simulated thread (a beat's tick loop, its publishing thread, a
worker's loop) as a strand: a real thread that runs only while the simulator resumes it,
and stops at the next gate (a store call, a broker call, a sleep). Only one strand runs at
any moment, so a history is decided by the order the simulator resumes them in, which its
seed decides: the same seed gives the same history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Killed(BaseException):
    """The process this strand belongs to was killed (SIGKILL): stop executing.

    A BaseException, so the code under test's `except Exception` handlers do not catch
    it; handlers that catch BaseException run, but every store or broker call they make
    raises this again, so a killed process changes nothing more.
    """


_local = threading.local()


class Strand:
    """Runs `body()` on a thread of its own, one step at a time: `resume()` lets it run
    until it calls `pause()` (at a gate) or returns."""

    def __init__(self, name: str, body: Callable[[], object]) -> None:
        self.name = name
        self.done = False
        self.error: BaseException | None = None
        self.value: object = None
        self.wake_at: float | None = None  # None: ready at once
        self._body = body
        self._go = threading.Semaphore(0)
        self._back = threading.Semaphore(0)
        self._thread = threading.Thread(target=self._main, name=f"sim-{name}", daemon=True)
        self._started = False

    def _main(self) -> None:
        self._go.acquire()
        _local.current = self
        try:
            self.value = self._body()
        except BaseException as exc:  # noqa: BLE001 - kept for whoever waits on the strand
            self.error = exc
        finally:
            self.done = True
            self._back.release()

    def resume(self) -> None:
        """Run the strand until its next gate or its end."""
        if self.done:
            return
        if not self._started:
            self._started = True
            self._thread.start()
        self._go.release()
        self._back.acquire()

    def join(self) -> None:
        if self._started:
            self._thread.join(5)


def current() -> Strand | None:
    """The strand running this code, if any."""
    return getattr(_local, "current", None)


def pause() -> None:
    """Hand control back to the simulator until it resumes this strand."""
    strand = current()
    if strand is None:
        raise RuntimeError("pause() outside a strand")
    strand._back.release()
    strand._go.acquire()
