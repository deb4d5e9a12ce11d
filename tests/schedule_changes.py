"""What the tests of a runtime change share: a schedule of many code entries, and a count
of what the scheduler registers and loads through its store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from safebeat.stores import Store


def code_entries(count: int) -> dict[str, Any]:
    """A `beat_schedule` of `count` hourly code entries, `code-0`... (each its own args)."""
    return {f"code-{i}": {"task": "t.code", "schedule": 3600.0, "args": (i,)} for i in range(count)}


class Counting:
    """The definitions `store` registered (the names of each call) and the states it loaded
    for ticks, and the digests and removed names its heartbeats carried, since it was made
    or last reset."""

    def __init__(self, store: Store) -> None:
        self.registered: list[list[str]] = []
        self.loaded: list[str] = []
        self.heartbeated: list[str] = []
        register, tick, heartbeat = store.register, store.tick, store.heartbeat

        def counted_register(namespace: str, definitions: Sequence[Any], replica: Any) -> Any:
            self.registered.append([d.name for d in definitions])
            return register(namespace, definitions, replica)

        def counted_tick(namespace: str, names: Sequence[str], *args: Any, **kw: Any) -> Any:
            self.loaded.extend(names)
            return tick(namespace, names, *args, **kw)

        def counted_heartbeat(
            namespace: str, replica: Any, version: str, digests: Any, *, removed: Any = None
        ) -> Any:
            self.heartbeated.extend([*(digests or ()), *(removed or ())])
            return heartbeat(namespace, replica, version, digests, removed=removed)

        store.register = counted_register  # type: ignore[method-assign]
        store.tick = counted_tick  # type: ignore[method-assign]
        store.heartbeat = counted_heartbeat  # type: ignore[method-assign]

    def reset(self) -> None:
        self.registered, self.loaded, self.heartbeated = [], [], []
