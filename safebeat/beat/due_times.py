"""When the scheduler next looks at each entry, with the earliest found without a scan.

Every tick asks which entries are due and how long to sleep. Scanning every entry for
that made an idle replica's CPU grow with its schedule (2 % of a CPU at 100,000 entries);
a heap of the distinct instants answers both from the entries actually due. Entries due at
one instant share it (a list of their names and one float): a large schedule's entries
are mostly planned in a few batches, and a heap item per entry cost about 80 bytes each.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping


class _Instant:
    """The names of the entries set to be due at one instant, in name order once read.

    A name stays here when its entry is set to another time; it counts only while the
    entry's time is this instant, and is dropped once it comes first."""

    __slots__ = ("at", "names", "sorted")

    def __init__(self, at: float) -> None:
        self.at = at
        self.names: list[str] = []
        self.sorted = True

    def add(self, name: str) -> None:
        names = self.names
        if names and name < names[-1]:
            self.sorted = False
        names.append(name)

    def in_order(self) -> list[str]:
        if not self.sorted:
            self.names.sort()
            self.sorted = True
        return self.names


class DueTimes:
    """Entry name -> the monotonic instant it is next due; the earliest first, ties by name."""

    def __init__(self, times: Mapping[str, float] | None = None) -> None:
        self._at: dict[str, float] = {}
        self._instants: dict[float, _Instant] = {}
        self._heap: list[float] = []
        for name, at in (times or {}).items():
            self.set(name, at)

    def __len__(self) -> int:
        return len(self._at)

    def get(self, name: str) -> float | None:
        return self._at.get(name)

    def set(self, name: str, at: float) -> None:
        if self._at.get(name) == at:
            return
        instant = self._instants.get(at)
        if instant is None:
            instant = self._instants[at] = _Instant(at)
            heapq.heappush(self._heap, at)
        instant.add(name)
        self._at[name] = instant.at  # one float per instant, not per entry

    def remove(self, name: str) -> None:
        self._at.pop(name, None)

    def _live(self, instant: _Instant) -> bool:
        """Drop the names at the front that are due at another time now; whether one
        that is due at this instant is left."""
        names, at, times = instant.names, instant.at, self._at
        stale = 0
        for name in names:
            if times.get(name) == at:
                break
            stale += 1
        if stale:
            del names[:stale]
        return bool(names)

    def earliest(self) -> float | None:
        """The soonest time of any entry (None when there is none)."""
        heap = self._heap
        while heap and not self._live(self._instants[heap[0]]):
            del self._instants[heapq.heappop(heap)]
        return heap[0] if heap else None

    def soonest(self, latest: float, limit: int) -> list[tuple[float, list[str]]]:
        """Up to `limit` of the soonest instants, none after `latest`, each with the names
        set at it in name order (some may be due at another time now: `get` tells); read
        from the heap's top, so as cheap however many follow."""
        first = self.earliest()
        if first is None:
            return []
        heap = self._heap
        found: list[tuple[float, list[str]]] = []
        frontier = [(first, 0)]
        while frontier and len(found) < limit:
            at, index = heapq.heappop(frontier)
            if at > latest:
                break
            found.append((at, self._instants[at].in_order()))
            for child in (2 * index + 1, 2 * index + 2):
                if child < len(heap):
                    heapq.heappush(frontier, (heap[child], child))
        return found

    def due(self, now: float, limit: int) -> list[str]:
        """Up to `limit` entries due at `now`, the most overdue first; they stay due until
        their time is set again."""
        heap, times = self._heap, self._at
        looked: list[float] = []
        found: list[str] = []
        seen: set[str] = set()
        while heap and len(found) < limit and heap[0] <= now:
            at = heapq.heappop(heap)
            instant = self._instants[at]
            if not self._live(instant):
                del self._instants[at]
                continue
            looked.append(at)
            for name in instant.in_order():
                if len(found) >= limit:
                    break
                if times.get(name) == at and name not in seen:
                    seen.add(name)
                    found.append(name)
        for at in looked:
            heapq.heappush(heap, at)
        return found
