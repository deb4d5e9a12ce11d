"""`safebeat.beat.housekeeping`: the views of the entries it hands the store instead of copies."""

from __future__ import annotations

from datetime import timezone

from safebeat.beat.housekeeping import Definitions, Digests
from safebeat.config import Config
from safebeat.entries import Entry, compile_schedule


def entries() -> dict[str, Entry]:
    compiled, broken = compile_schedule(
        {f"e{i}": {"task": "t.run", "schedule": 60 + i} for i in range(5)},
        app_timezone=timezone.utc,
        config=Config(namespace="house"),
    )
    assert not broken
    return compiled


def test_definitions_read_as_the_list_of_every_entrys_definition() -> None:
    compiled = entries()
    listed = [entry.definition for entry in compiled.values()]
    view = Definitions(list(compiled.values()))
    assert len(view) == len(listed)
    assert list(view) == listed
    assert [view[i] for i in range(len(view))] == listed
    assert view[-1] == listed[-1]
    assert view[1:3] == listed[1:3]
    assert view[4:100] == listed[4:100]


def test_digests_read_as_a_dict_of_every_entrys_digest() -> None:
    compiled = entries()
    digests = {name: entry.digest for name, entry in compiled.items()}
    view = Digests(compiled)
    assert dict(view) == digests
    assert view == digests
    assert view == Digests(entries())  # equal entries compiled again
    assert len(view) == 5
    assert "e9" not in view
