"""One object for equal values read from a store in one go.

Registering 100,000 entries at one instant reads back 100,000 states with the same
anchor and definition time and a handful of schedule texts; each row's own copies cost
about 150 bytes of every state.
"""

from __future__ import annotations

from typing import TypeVar

_Value = TypeVar("_Value")


class Sharing:
    """`shared(value)`: the first equal value seen, else `value` (None stays None).

    Equal instants in different time zones stay apart: the key holds the zone too.
    """

    def __init__(self) -> None:
        self._seen: dict[object, object] = {}

    def shared(self, value: _Value) -> _Value:
        if value is None:
            return value
        key = (type(value), value, getattr(value, "tzinfo", None))
        return self._seen.setdefault(key, value)  # type: ignore[return-value]
