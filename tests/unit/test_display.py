"""How text from the store reads on an operator's terminal."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from safebeat.display import attempts, one_line, printable
from safebeat.records import DispatchRecord, Status


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("report", "report"),
        ("a\nb", "a\\nb"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("tab\there\r", "tab\\there\\r"),
        ("\x9b31m", "\\x9b31m"),  # the one-byte CSI of C1 controls
        ("abc\u202edef", "abc\\u202edef"),  # a right-to-left override
        ("ünïcode ✓", "ünïcode ✓"),
        ("C:\\path", "C:\\path"),
    ],
)
def test_what_a_terminal_would_obey_prints_as_its_escape(text: str, shown: str) -> None:
    """Newlines, ESC, C1 controls and bidirectional overrides print as escapes; printable
    text, whatever its script, and backslashes stay as they are."""
    assert printable(text) == shown


def test_an_error_is_one_line_without_control_characters() -> None:
    """A multi-line message is joined with "; ", and an ESC inside a line is escaped."""
    assert one_line("first\n  second \x1b[2J\n\n") == "first; second \\x1b[2J"


@pytest.mark.parametrize(
    ("status", "stored", "shown"),
    [
        (Status.SENT, 1, "1"),
        (Status.SENT, 3, "3"),
        (Status.CLAIMED, 2, "2"),
        (Status.SKIPPED, 1, "-"),
    ],
)
def test_a_skipped_window_shows_no_publish_attempts(
    status: Status, stored: int, shown: str
) -> None:
    """A skipped row was never published: its stored `attempts` (the column's default, 1)
    is not shown as one attempt in `history` or the web console."""
    window = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    record = DispatchRecord(
        id=1, entry="report", window=window, status=status, task_id=None, task_name=None,
        reason="paused" if status is Status.SKIPPED else None, skipped_from=None,
        skipped_count=None, replica="host-a:1:aa", host="host-a", pid=1, claimed_at=window,
        sent_at=None, attempts=stored, error=None,
    )  # fmt: skip
    assert attempts(record) == shown
