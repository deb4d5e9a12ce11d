"""A safebeat scheduler whose ticks claim in small rounds, so a few hundred due entries take
several pipelined rounds (the stock first round is 500, doubling up to 5,000).

Each tick that took more than one round logs `safebeat-test: a tick of N rounds`, so a test
can tell that the multi-round path ran.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import safebeat
from safebeat.beat.tick_rounds import Round

logger = logging.getLogger(__name__)


class Scheduler(safebeat.Scheduler):
    first_round = 20
    claim_batch = 100
    max_interval = 1.0  # with a 4 s claim timeout, rounds are claimed while others publish

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rounds_this_tick = 0
        claim = self.engine.claim

        def counted(due: Sequence[str], *, reclaim: bool, started: float) -> Round | None:
            claimed = claim(due, reclaim=reclaim, started=started)
            self.rounds_this_tick += claimed is not None
            return claimed

        self.engine.claim = counted  # type: ignore[method-assign]

    def tick(self, *args: Any, **kwargs: Any) -> float:
        self.rounds_this_tick = 0
        delay = super().tick(*args, **kwargs)
        if self.rounds_this_tick > 1:
            logger.warning("safebeat-test: a tick of %d rounds", self.rounds_this_tick)
        return delay
