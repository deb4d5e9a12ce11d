"""Beat's look at the entries added at run time (`safebeat.schedules`): their version read
every so often, their definitions only when it moved, compiled beside the code's entries."""

from __future__ import annotations

import logging
from collections import ChainMap
from collections.abc import Mapping
from datetime import tzinfo
from typing import Any

from safebeat.beat.metrics import BeatMetrics
from safebeat.config import Config
from safebeat.entries import Entry, compile_schedule
from safebeat.errors import EntryError
from safebeat.runtime import compile_runtime
from safebeat.stores import Store

logger = logging.getLogger("safebeat.scheduler")


class RuntimeWatch:
    """The stored definitions beat last read (`specs`, at `version`), when to look again
    (`next_look`, monotonic) and the names that clash with the code's entries."""

    def __init__(self) -> None:
        self.specs: dict[str, str] = {}
        self.version: int | None = None
        self.next_look = 0.0
        self.clashes: frozenset[str] = frozenset()

    def look(self, store: Store, namespace: str, *, now: float, interval: float) -> bool:
        """One read of the version; the definitions only when it moved. True when they
        changed, so the entries are to be compiled again."""
        self.next_look = now + interval
        version = store.runtime_version(namespace)
        if version == self.version:
            return False
        specs = store.runtime_entries(namespace)
        self.version = version
        if specs == self.specs:
            return False
        logger.info(
            "safebeat: entries added at run time changed: %d stored (version %d)",
            len(specs),
            version,
        )
        self.specs = specs
        return True

    def compiled(
        self,
        beat_schedule: Mapping[str, Any],
        *,
        app_timezone: tzinfo,
        config: Config,
        metrics: BeatMetrics,
    ) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The code's entries (`beat_schedule`) and the stored ones, compiled; a stored
        entry whose name the code uses is left out (the code's runs) and reported, once."""
        entries, broken = compile_schedule(beat_schedule, app_timezone=app_timezone, config=config)
        runtime = compile_runtime(
            self.specs,
            taken=ChainMap[str, Any](entries, broken),  # not a set of every name
            app_timezone=app_timezone,
            config=config,
        )
        for name in sorted(runtime.clashes - self.clashes):
            logger.error(
                "safebeat: entry %r was added at run time but the app's beat_schedule defines "
                "it too; the code's entry runs: remove the stored one with `safebeat schedule "
                "remove %s`",
                name,
                name,
            )
        self.clashes = runtime.clashes
        metrics.runtime_entries(len(runtime.entries))
        # The code's entries as they are when none were added at run time: at start-up
        # a copy would hold every entry twice.
        if runtime.entries:
            entries = {**entries, **runtime.entries}
        if runtime.broken:
            broken = {**broken, **runtime.broken}
        return entries, broken
