"""What changed between the entries beat ran and the ones it runs now, by definition digest:
so that one entry added, edited or removed among many costs that one entry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from safebeat.entries import Entry


@dataclass(frozen=True)
class EntryChanges:
    """`changed`: the entries new or defined otherwise (another digest), to register and
    plan again; `removed`: the entries no longer run, to plan no more. Both sorted."""

    changed: tuple[str, ...]
    removed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed)


def entry_changes(before: Mapping[str, Entry], after: Mapping[str, Entry]) -> EntryChanges:
    """The entries of `after` that `before` lacks or defines with another digest, and the
    entries of `before` that `after` lacks. An entry compiled again to the same digest is
    unchanged: the digest covers everything it sends and when (`safebeat.entries.digest`)."""
    changed = [
        name
        for name, entry in after.items()
        if (old := before.get(name)) is None or old.digest != entry.digest
    ]
    removed = [name for name in before if name not in after]
    return EntryChanges(tuple(sorted(changed)), tuple(sorted(removed)))
