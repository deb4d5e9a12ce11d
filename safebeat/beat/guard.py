"""Beat's error boundary: nothing raised in a tick escapes into Celery's loop.

Store trouble becomes a backoff (claiming nothing meanwhile: fail closed) with a log
line and a metric; anything else is logged with its traceback and retried the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from safebeat import signals
from safebeat.backoff import Backoff
from safebeat.beat.metrics import BeatMetrics
from safebeat.beat.probes import ProbeState
from safebeat.errors import StoreError, StoreUnavailable, TickTooLong

logger = logging.getLogger("safebeat.scheduler")


class TickGuard:
    """Runs one step of beat's work and returns the seconds to sleep, never raising.

    After a failure, `backoff.waiting(now)` says the store is being left alone; a step
    that succeeds again resets the backoff and says the store is back. Each failure is
    also sent as `safebeat.signals.tick_failed`, from `sender`. `probes` hears whether
    the store answered (readiness).
    """

    def __init__(
        self,
        metrics: BeatMetrics,
        probes: ProbeState,
        *,
        monotonic: Callable[[], float],
        max_sleep: float,
        store_url: Callable[[], str],
        url_origin: str = "",
        sender: object = None,
    ) -> None:
        self.backoff = Backoff()
        self._metrics = metrics
        self._probes = probes
        self._monotonic = monotonic
        self._max_sleep = max_sleep
        self._store_url = store_url
        #: Where the store URL came from, said with every store error (`config.url_origin`).
        self._url_origin = f"; the store URL is from {url_origin}" if url_origin else ""
        self._failures = 0
        self._sender = sender
        self._steps = 0
        #: Whether the latest step finished without an error.
        self.succeeded = False

    @property
    def running(self) -> bool:
        """Whether a step is under way: true in a signal handler that interrupted one."""
        return self._steps > 0

    def run(self, step: Callable[[], float]) -> float:
        """Run `step`; turn store trouble into a backoff and anything else into a log line."""
        self._steps += 1
        self.succeeded = False
        try:
            delay = step()
        except TickTooLong as exc:
            # Not the store's health: the tick was too big. The next, smaller one goes now.
            self._metrics.store_error("tick_too_long")
            logger.warning("safebeat: %s", exc)
            return 0.0
        except StoreUnavailable as exc:
            self._metrics.store_error("unavailable")
            self._probes.store_failed()
            return self._failed(exc, "store unreachable", logging.WARNING, origin=True)
        except StoreError as exc:
            self._metrics.store_error("error")
            self._probes.store_failed()
            return self._failed(exc, "store error", logging.ERROR, origin=True)
        except Exception as exc:
            logger.exception("safebeat: unexpected error in tick: %s", exc)
            return self._failed(exc, "unexpected error", logging.ERROR, counted=False)
        finally:
            self._steps -= 1
        if self._failures:
            logger.info(
                "safebeat: store %s reachable again after %d failed attempt(s)",
                self._store_url(),
                self._failures,
            )
            self._failures = 0
        self._probes.store_answered()
        self.backoff.succeeded()
        self.succeeded = True
        return delay

    def _failed(
        self, exc: Exception, what: str, level: int, *, counted: bool = True, origin: bool = False
    ) -> float:
        if counted:
            self._failures += 1
        delay = self.backoff.failed(self._monotonic())
        logger.log(
            level,
            "safebeat: %s (%s); claiming nothing, retrying in %.1fs%s",
            what,
            exc,
            delay,
            self._url_origin if origin else "",
        )
        signals.send(signals.tick_failed, self._sender, exception=exc, reason=what, retry_in=delay)
        return min(delay, self._max_sleep)
