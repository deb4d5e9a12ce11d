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
from safebeat.entries.runtime_definitions import compile_runtime
from safebeat.errors import EntryError
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
        # The code's items last compiled (names, items, time zone, config) and the entries
        # returned from them: while the items are the same, a change of the stored entries
        # compiles only those. Two tuples of references, not a copy of the schedule.
        self._source: tuple[tuple[str, ...], tuple[Any, ...], tzinfo, Config] | None = None
        self._returned: Mapping[str, Entry] | None = None

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
        running: Mapping[str, Entry] | None = None,
    ) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The code's entries (`beat_schedule`) and the stored ones, compiled; a stored
        entry whose name the code uses is left out (the code's runs) and reported, once.

        `running`: the entries beat runs. When they are what this returned last time and
        the code's items are the same objects (or equal ones) in the same time zone and
        config, a code entry beat runs is taken from them instead of compiled again."""
        entries, broken = self._code_entries(
            beat_schedule,
            app_timezone=app_timezone,
            config=config,
            running=running if running is not None and running is self._returned else None,
        )
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
        self._returned = entries
        return entries, broken

    def _code_entries(
        self,
        beat_schedule: Mapping[str, Any],
        *,
        app_timezone: tzinfo,
        config: Config,
        running: Mapping[str, Entry] | None,
    ) -> tuple[dict[str, Entry], dict[str, EntryError]]:
        """The code's entries compiled, those of `running` reused while the items are the
        same; an item in place of another, a new name, another time zone or config: all
        compiled again. (An item changed in place is seen at the next start, as it was.)"""
        source = (tuple(beat_schedule), tuple(beat_schedule.values()), app_timezone, config)
        previous, self._source = self._source, source
        if running is None or previous is None or not _same(previous, source):
            return compile_schedule(beat_schedule, app_timezone=app_timezone, config=config)
        rest = {name: beat_schedule[name] for name in source[0] if name not in running}
        fresh, broken = compile_schedule(rest, app_timezone=app_timezone, config=config)
        entries: dict[str, Entry] = {}
        for name in source[0]:  # in the code's order, as a full compile gives them
            entry = running.get(name) if name not in rest else fresh.get(name)
            if entry is not None:
                entries[name] = entry
        return entries, broken


def _same(before: tuple[Any, ...], after: tuple[Any, ...]) -> bool:
    """Whether two snapshots of the code's items are equal (the same objects at no cost);
    an item that cannot say (its comparison raises) counts as changed."""
    try:
        return bool(before == after)
    except Exception:  # noqa: BLE001 - a user's object: compile again, the safe answer
        return False
