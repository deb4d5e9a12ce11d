"""Execution leases in a worker process: one daemon thread renews every run it holds.

The worker hook `hold`s each run it started (RUN or TAKEOVER) and `release`s it when the
task returns. While a run is held, a light daemon thread of this process renews the
leases of all held runs of one store in one call (`ExecutionStore.renew_executions`)
every third of the lease, so a live run's lease never lapses, and a run whose process
died stops being renewed and is dead one lease later, on every pool.

Renewal failures never touch the task: they are logged and counted, and the next round
tries again. A run stays held until its end is recorded: when recording it fails (the
task thread's connection sat idle for the whole run, and a restart, a failover or an
idle cut ends it), the hook hands the end to the renewer (`finish_later`), which keeps
renewing the lease and records the end at each round until it is in the store. So a
run's end is recorded before its lease stops, and a store blip at the end never makes a
finished window look dead (it would be taken over and run again).

The thread starts on first use in each process (a forked pool child gets its own) and
sleeps while nothing is held.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

from safebeat.config import Config
from safebeat.errors import SafebeatError
from safebeat.records import LeasedRun, RunEnd
from safebeat.stores.per_process import store_for
from safebeat.stores.protocols import ExecutionStore
from safebeat.worker.metrics import metrics as worker_metrics

logger = logging.getLogger("safebeat.worker")


@dataclass(frozen=True)
class _Held:
    config: Config
    run: LeasedRun
    end: RunEnd | None = None  # the run ended; recording its end is still to do


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
        """Renew `run`'s lease until `release` is called with the returned token.

        A run of this process held under the same name (window, worker, retries) was
        taken over by this start (the store started it anew, so its lease had lapsed: a
        stall, a clock jump): it is no longer held, so its late renewals and its end do
        not land on the new run's row (see `holds`)."""
        with self._mutex:
            self._forked()
            for token, held in list(self._held.items()):
                same_store = (held.config.url, held.config.namespace) == (
                    config.url,
                    config.namespace,
                )
                if same_store and held.run == run:
                    del self._held[token]
                    logger.warning(
                        "safebeat: an earlier run of entry %r window %s in this process was "
                        "taken over by a new start; its end will not be recorded",
                        run.entry,
                        run.window.isoformat(),
                    )
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

    def holds(self, token: int) -> bool:
        """Whether the run `hold` returned `token` for is still held: not released, nor
        taken over by a start of the same run in this process."""
        with self._mutex:
            return token in self._held

    def release(self, token: int) -> None:
        """Stop renewing the run `hold` returned `token` for."""
        with self._mutex:
            self._held.pop(token, None)

    def finish_later(self, token: int, end: RunEnd) -> None:
        """The run `hold` returned `token` for ended, and recording `end` failed: keep
        renewing its lease and record the end at each round until it is recorded (then
        the run is released)."""
        with self._mutex:
            held = self._held.get(token)
            if held is not None:
                self._held[token] = replace(held, end=end)
        self._wake.set()

    def held(self) -> list[LeasedRun]:
        """The runs renewed now."""
        with self._mutex:
            return [h.run for h in self._held.values()]

    def renew_now(self) -> int:
        """Renew every held run now, one store call per store, then record the ends still
        to record; return how many runs were renewed."""
        with self._mutex:
            groups: dict[tuple[str, str], tuple[Config, list[LeasedRun], list[int]]] = {}
            for token, h in self._held.items():
                key = (h.config.url, h.config.namespace)
                group = groups.setdefault(key, (h.config, [], []))
                group[1].append(h.run)
                group[2].append(token)
            ends = [(token, h) for token, h in self._held.items() if h.end is not None]
        renewed = 0
        for config, runs, tokens in groups.values():
            try:
                count = self._store(config).renew_executions(
                    config.namespace, runs, lease=config.execution_lease
                )
                renewed += count
                lost = len(runs) - count - self._released(tokens)
                if lost > 0:
                    logger.warning(
                        "safebeat: %d of %d run(s) of this process no longer hold their "
                        "lease (taken over after it lapsed); their leases are not renewed",
                        lost,
                        len(runs),
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
        for token, held in ends:
            self._record_end(token, held)
        return renewed

    def _released(self, tokens: list[int]) -> int:
        """How many of `tokens` were released since they were read: runs that ended while
        their renewal was on its way (their rows are finished, so it renewed none)."""
        with self._mutex:
            return sum(1 for token in tokens if token not in self._held)

    def _record_end(self, token: int, held: _Held) -> None:
        """Record the end of a run whose first record failed; release it once recorded."""
        assert held.end is not None  # noqa: S101 - only runs with an end are passed
        try:
            self._store(held.config).finish_execution(held.config.namespace, held.run, held.end)
        except SafebeatError as exc:
            logger.warning(
                "safebeat: recording the end of entry %r window %s failed again (%s); its "
                "lease is kept and the end retried in %s",
                held.run.entry,
                held.run.window.isoformat(),
                exc,
                self._interval(),
            )
            return
        except Exception:  # a bug here must not stop the renewals (logged)
            logger.exception("safebeat: recording the end of a run failed")
            return
        logger.info(
            "safebeat: the end of entry %r window %s is recorded",
            held.run.entry,
            held.run.window.isoformat(),
        )
        self.release(token)

    def _interval(self) -> timedelta:
        with self._mutex:
            leases = [h.config.execution_lease for h in self._held.values()]
        return renewal_period(min(leases, default=Config().execution_lease))

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
            due = next_round(due, time.monotonic(), self._interval().total_seconds())

    def _forked(self) -> None:
        # A forked pool child inherits the parent's runs but not its thread.
        if self._pid != os.getpid():
            self._pid, self._held, self._thread = os.getpid(), {}, None
            self._wake = threading.Event()


def renewal_period(lease: timedelta) -> timedelta:
    """How often a run's lease is renewed: every third of it. A live run keeps its lease
    through one failed round; a store outage or a stall longer than two thirds of the
    lease can let it lapse. A deferred delivery looks again after as long (see
    `safebeat.worker.delivery`), so it comes within this period after a dead run's lease
    lapsed."""
    return lease / 3


def next_round(due: float, now: float, interval: float) -> float:
    """When the round after the one due at `due` is due, `now` being when that one ended.

    Rounds keep a fixed rate: one interval after the last was *due*, not after it ended.
    A round that waited `safebeat_lock_timeout` on a row lock and failed is retried at
    once if that took longer than an interval, so a live run survives a blocked renewal
    whenever the next round gets through inside the lease (the rate never drifts by the
    time the rounds take). A round that ended more than an interval late (the process
    was stalled) is not followed by a burst to catch up: one round now.
    """
    return max(due + interval, now)


#: This process's renewer, used by the worker hook.
renewer = LeaseRenewer()
