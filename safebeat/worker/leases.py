"""Execution leases in a worker process: one daemon thread renews every run it holds.

The worker hook `hold`s each run it started (RUN or TAKEOVER) and `release`s it when the
task returns. While a run is held, a light daemon thread of this process renews the
leases of all held runs of one store in one call (`ExecutionStore.renew_executions`)
every third of the lease, so a live run's lease never lapses, and a run whose process
died stops being renewed and is dead one lease later, on every pool.

Renewal failures never touch the task: they are logged and counted, and the next round
tries again. The thread starts on first use in each process (a forked pool child gets its
own) and sleeps while nothing is held.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from safebeat.config import Config
from safebeat.errors import SafebeatError
from safebeat.records import LeasedRun
from safebeat.stores.base import ExecutionStore
from safebeat.stores.per_process import store_for
from safebeat.worker.metrics import metrics as worker_metrics

logger = logging.getLogger("safebeat.worker")


@dataclass(frozen=True)
class _Held:
    config: Config
    run: LeasedRun


class LeaseRenewer:
    """The runs this process holds, and the thread that renews their leases.

    `store` opens the renewing thread's own store for a config (a store is used by one
    thread); `wait(seconds)` is how the thread sleeps between rounds, so tests can drive
    rounds with `renew_now` instead of sleeping.
    """

    def __init__(self, store: Callable[[Config], ExecutionStore] = store_for) -> None:
        self._store = store
        self._mutex = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._next = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def hold(self, config: Config, run: LeasedRun) -> int:
        """Renew `run`'s lease until `release` is called with the returned token."""
        with self._mutex:
            self._forked()
            self._next += 1
            self._held[self._next] = _Held(config, run)
            token = self._next
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="safebeat-lease", daemon=True
                )
                self._thread.start()
        self._wake.set()
        return token

    def release(self, token: int) -> None:
        """Stop renewing the run `hold` returned `token` for."""
        with self._mutex:
            self._held.pop(token, None)

    def held(self) -> list[LeasedRun]:
        """The runs renewed now."""
        with self._mutex:
            return [h.run for h in self._held.values()]

    def renew_now(self) -> int:
        """Renew every held run now, one store call per store; return how many were renewed."""
        with self._mutex:
            groups: dict[tuple[str, str], tuple[Config, list[LeasedRun]]] = {}
            for h in self._held.values():
                key = (h.config.url, h.config.namespace)
                groups.setdefault(key, (h.config, []))[1].append(h.run)
        renewed = 0
        for config, runs in groups.values():
            try:
                renewed += self._store(config).renew_executions(
                    config.namespace, runs, lease=config.execution_lease
                )
            except SafebeatError as exc:
                worker_metrics.renewal_error()
                logger.warning(
                    "safebeat: renewing the leases of %d run(s) failed (%s); retrying in "
                    "%s. A run whose lease lapses may be taken over by a redelivery",
                    len(runs),
                    exc,
                    self._interval(),
                )
            except Exception:  # a bug here must not stop the renewals (logged)
                worker_metrics.renewal_error()
                logger.exception("safebeat: renewing execution leases failed")
        return renewed

    def _interval(self) -> timedelta:
        with self._mutex:
            leases = [h.config.execution_lease for h in self._held.values()]
        return min(leases, default=timedelta(seconds=30)) / 3

    def _loop(self) -> None:
        due: float | None = None  # when the next round renews (monotonic seconds)
        while True:
            with self._mutex:
                idle = not self._held
            if idle:
                due = None
                self._wake.wait()
                self._wake.clear()
                continue
            now = time.monotonic()
            if due is None:
                due = now + self._interval().total_seconds()
            if now < due:
                if self._wake.wait(due - now):
                    self._wake.clear()  # a new run: its lease is fresh; the round stays due
                continue
            self.renew_now()
            due = time.monotonic() + self._interval().total_seconds()

    def _forked(self) -> None:
        # A forked pool child inherits the parent's runs but not its thread.
        if self._pid != os.getpid():
            self._pid, self._held, self._thread = os.getpid(), {}, None
            self._wake = threading.Event()


#: This process's renewer, used by the worker hook.
renewer = LeaseRenewer()
