"""The claim rounds of one tick, each published while the next is claimed.

While more entries are due, a tick goes on claiming round after round (for up to
`max_interval`): each round's messages go to the broker on the publishing thread
(`safebeat.beat.pipeline`) while the tick's own thread records the round before as sent
and claims the next. What a round does on the store and the broker is the engine's
(`RoundSteps`); the order of those steps, and what is left behind when one of them fails
or a signal interrupts them, is this module's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

from safebeat.beat.dispatch import Sending
from safebeat.beat.pipeline import BackgroundPublish, PublishedAlready
from safebeat.records import Claim, TickResult

logger = logging.getLogger("safebeat.scheduler")


@dataclass(frozen=True)
class Round:
    """One claim round of a tick: the store's result, the claims to publish (new and
    taken over), and the monotonic instant the claim began."""

    result: TickResult
    claims: Sequence[Claim]
    started: float


Publishing = BackgroundPublish[Sending] | PublishedAlready[Sending]


class RoundSteps(Protocol):
    """What one round does, on the store and the broker (the tick engine's)."""

    @property
    def ready(self) -> bool:
        """Whether the entries are registered (a round that found one unregistered says no)."""

    def claim(self, due: Sequence[str], *, reclaim: bool, started: float) -> Round | None:
        """Claim `due` under the store's tick lock; None if another replica holds it."""

    def due(self, now: float, rounds_before: int) -> list[str]:
        """The entries due at `now` for the round after `rounds_before` others."""

    def publish(self, claimed: Round) -> Publishing:
        """Start publishing `claimed` (on the publishing thread when `pipelining()`)."""

    def pipelining(self) -> bool:
        """Whether the next round is claimed while this one is published."""

    def settle(self, claimed: Round, sending: Sending) -> None:
        """Record what the publish of `claimed` did."""

    def hand_back(self, claimed: Round) -> None:
        """Give `claimed`'s claims back to the store, never handed to the broker."""


class TickRounds:
    """Claims and publishes the rounds of one tick, for up to `max_interval` seconds."""

    def __init__(self, steps: RoundSteps, *, monotonic: Callable[[], float]) -> None:
        self._steps = steps
        self._monotonic = monotonic

    def run(
        self, due: Sequence[str], *, reclaim: bool, max_interval: float
    ) -> list[TickResult] | None:
        """Claim `due` (and take over stale claims if `reclaim`), then publish round after
        round while more entries are due, for up to `max_interval`: each round's messages go
        to the broker on a thread of their own while this thread records the round before
        as sent and claims the next. None if another replica held the tick lock for the
        first round."""
        started = self._monotonic()
        current = self._steps.claim(due, reclaim=reclaim, started=started)
        if current is None:
            return None
        results = [current.result]
        deadline = started + max_interval
        looked_at = set(due)
        publishing: Publishing | None = self._steps.publish(current)
        while current is not None and publishing is not None:
            current, publishing = self._publish_while_claiming(
                current, publishing, deadline, len(results), looked_at
            )
            if current is not None:
                results.append(current.result)
        return results

    def _publish_while_claiming(
        self,
        current: Round,
        publishing: Publishing,
        deadline: float,
        rounds_before: int,
        looked_at: set[str],
    ) -> tuple[Round | None, Publishing | None]:
        """While `current` is published, claim the next round (if entries are due and the
        tick has time left); once `current` is on the broker, start publishing the next
        round and record `current` meanwhile. Return the next round and its publishing."""
        steps = self._steps
        try:
            following = self._next_round(deadline, rounds_before, looked_at)
        except Exception:
            steps.settle(current, publishing.result())
            raise
        except BaseException:
            # SystemExit from a signal handler: the store call it interrupted may have
            # left the store's connection unusable. Stop publishing soon and record
            # nothing; what was sent is re-published, same task ids, after the claim timeout.
            # An error of that publish must not take the SystemExit's place.
            with suppress(Exception):
                publishing.result(stop=True)
            raise
        try:
            sending = publishing.result()
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # SystemExit from a signal handler, raised while this thread waited: the
                # round stops at its next message (close() would otherwise let the thread
                # publish the rest, which nobody records as sent).
                with suppress(Exception):
                    publishing.result(stop=True)
                if following is not None:
                    # A store error here must not take the SystemExit's place: the
                    # tick would back off and go on claiming after SIGTERM.
                    self._hand_back_after_error(following)
            elif following is not None:
                steps.hand_back(following)
            raise
        if following is not None and sending.broker_error is not None:
            # The broker is down: the next round is never handed to it, so its claims
            # go back to the store at once.
            steps.settle(current, sending)
            steps.hand_back(following)
            return None, None
        if following is None or not steps.pipelining():
            # One after the other: a round waits for no publish but its own before it is
            # recorded, however short the claim timeout.
            try:
                steps.settle(current, sending)
            except Exception:
                if following is not None:
                    self._hand_back_after_error(following)
                raise
            return following, None if following is None else steps.publish(following)
        publishing_next = steps.publish(following)
        try:
            steps.settle(current, sending)
        except Exception:
            self._settle_after_error(following, publishing_next)
            raise
        except BaseException:
            with suppress(Exception):  # the SystemExit goes on, whatever that publish did
                publishing_next.result(stop=True)
            raise
        return following, publishing_next

    def _hand_back_after_error(self, claimed: Round) -> None:
        """Hand `claimed` back while an error from recording the round before it is on its
        way out of the tick; if that fails too, its claims wait the claim timeout."""
        try:
            self._steps.hand_back(claimed)
        except Exception:  # noqa: BLE001 - the error on its way out says what went wrong
            logger.debug("safebeat: handing back %d claim(s) failed", len(claimed.claims))

    def _settle_after_error(self, claimed: Round, publishing: Publishing) -> None:
        """Record `claimed` once its publish ends, while an error from recording the round
        before it is on its way out of the tick; a second error is only logged (the claims
        then wait the claim timeout, and are re-published with the same task ids)."""
        sending = publishing.result()
        try:
            self._steps.settle(claimed, sending)
        except Exception:
            logger.warning(
                "safebeat: could not record %d published claim(s) either; they are "
                "re-published with the same task ids after safebeat_claim_timeout",
                len(claimed.claims),
                exc_info=True,
            )

    def _next_round(self, deadline: float, rounds_before: int, looked_at: set[str]) -> Round | None:
        """The next round's claim: due entries this tick has not looked at yet (an entry
        due again already waits for the next tick, after the heartbeat and housekeeping)."""
        now = self._monotonic()
        if now >= deadline or not self._steps.ready:
            return None
        due = [name for name in self._steps.due(now, rounds_before) if name not in looked_at]
        if not due:
            return None
        looked_at.update(due)
        return self._steps.claim(due, reclaim=False, started=now)
