"""How text from the store reads on an operator's terminal."""

from __future__ import annotations

import pytest

from safebeat.display import one_line, printable


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
