"""A safebeat scheduler whose ticks claim in small rounds, so a few hundred due entries take
several pipelined rounds (the stock first round is 500, doubling up to 5,000).

Each tick that took more than one round logs `safebeat-test: a tick of N rounds`, so a test
can tell that the multi-round path ran.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import safebeat
from safebeat.records import TickResult

logger = logging.getLogger(__name__)


class Scheduler(safebeat.Scheduler):
    first_round = 20
    claim_batch = 100
    max_interval = 1.0  # with a 4 s claim timeout, rounds are claimed while others publish

    def _claim_and_publish(self, due: Sequence[str], *, reclaim: bool) -> list[TickResult] | None:
        results = super()._claim_and_publish(due, reclaim=reclaim)
        if results is not None and len(results) > 1:
            logger.warning("safebeat-test: a tick of %d rounds", len(results))
        return results
