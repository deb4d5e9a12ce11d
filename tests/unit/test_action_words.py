"""The table of operator actions (`safebeat.ops.actions`): each text it says is listed for
the admin's catalogs (`safebeat.contrib.django.words`), and its one presentation of what
a trigger or a backfill published reads the same on every surface."""

from __future__ import annotations

import ast
from datetime import datetime, timezone
from pathlib import Path

import pytest

from safebeat.identity import Replica
from safebeat.ops import actions
from safebeat.ops.operations import Published
from safebeat.records import Claim, Definition
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock
from tests.unit.test_scheduler import START

ROOT = Path(__file__).parents[2] / "safebeat"


def _texts(path: Path, calls: set[str], keywords: set[str]) -> set[str]:
    """Every literal string passed to one of `calls` (positionally), or as one of
    `keywords`, in the module at `path`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        args = node.args if name in calls else []
        values = [*args, *(k.value for k in node.keywords if k.arg in keywords)]
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(value.value)
    return found


def test_every_text_of_the_table_is_in_the_admins_catalog() -> None:
    said = _texts(ROOT / "ops" / "actions.py", {"Said"}, {"plural", "label", "refused"})
    said -= {level.value for level in actions.Level}
    listed = _texts(
        ROOT / "contrib" / "django" / "words.py", {"gettext_noop", "ngettext_lazy"}, set()
    )
    assert said - listed == set(), "add them to safebeat/contrib/django/words.py"
    labels = {action.label for action in actions.ACTIONS.values()}
    refusals = {action.refused for action in actions.ACTIONS.values()}
    assert labels | refusals <= listed


def _claim(second: int) -> Claim:
    window = datetime(2026, 3, 1, 6, 0, second, tzinfo=timezone.utc)
    return Claim(id=second, entry="report", window=window, task_id=f"t{second}", attempts=1)


def test_a_backfill_says_its_windows_once_each_and_every_problem() -> None:
    found = Published(
        sent=[_claim(1), _claim(2)],
        unsent=[_claim(3)],
        failed={"2026-03-01T06:00:04Z": "too large"},
        already_claimed=1,
    )
    subject = actions.Said(actions.Level.OK, "backfilled %(name)r", {"name": "report"})
    result = actions.published(subject, found)
    assert result.failed
    assert [text for _level, text in result.said()] == [
        "backfilled 'report': 2 windows sent, 2026-03-01T06:00:01Z to 2026-03-01T06:00:02Z",
        "backfilled 'report': window 2026-03-01T06:00:01Z sent (task id t1)",
        "backfilled 'report': window 2026-03-01T06:00:02Z sent (task id t2)",
        "backfilled 'report': window 2026-03-01T06:00:03Z claimed, but the broker is "
        "unreachable: a beat replica sends it after safebeat_claim_timeout",
        "backfilled 'report': window 2026-03-01T06:00:04Z could not be sent: too large",
        "backfilled 'report': 1 window already had a row; left alone",
    ]


def test_a_trigger_names_its_one_window_in_the_summary() -> None:
    subject = actions.Said(actions.Level.OK, "triggered %(name)r", {"name": "report"})
    result = actions.published(subject, Published([_claim(1)], [], {}, 0))
    assert result.said() == [
        (actions.Level.OK, "triggered 'report': window 2026-03-01T06:00:01Z sent (task id t1)")
    ]
    assert not result.failed


def test_fields_read_what_is_typed() -> None:
    backfill = actions.ACTIONS["backfill"]
    values = backfill.values({"start": " 2026-03-01T06:00:00Z ", "end": "2026-03-01T07:00:00Z"})
    assert values["start"] == datetime(2026, 3, 1, 6, tzinfo=timezone.utc)
    assert values["note"] is None
    with pytest.raises(actions.BadField) as refused:
        backfill.values({"start": "2026-03-01", "end": "2026-03-01T07:00:00Z"})
    assert refused.value.field.option == "--from"


@pytest.mark.parametrize("name", ["pause", "resume"])
def test_an_action_records_the_audit_it_declares(name: str) -> None:
    """The row's `audit` is what the trail holds after it ran, with the note given."""
    store = MemoryStore(clock=FakeClock(START).now)
    store.register("unit", [Definition("report", "every 60s", "d")], Replica("h", 1, "aaaaaa"))
    action = actions.ACTIONS[name]
    target = actions.Target(store, "unit", "report", "ops@host")
    result = action.run(target, action.values({"note": "why"}))
    [record] = store.audit("unit")
    assert (record.action, record.actor, record.entry, record.note) == (
        action.audit,
        "ops@host",
        "report",
        "why",
    )
    assert result.headline().startswith(f"{name}d 'report' (namespace 'unit')")
