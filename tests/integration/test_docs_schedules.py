"""docs/schedules.md's command-line session, run as shown against a real SQLite store:
every output line the page shows is what the commands print."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from safebeat.cli import main
from tests.docpages import Block, Page, missing_lines

PAGE = Page(Path(__file__).parents[2] / "docs" / "schedules.md")


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `proj` app whose beat_schedule defines `nightly-report`, on a SQLite store."""
    (tmp_path / "proj.py").write_text(
        "from celery import Celery\n"
        "app = Celery('proj', broker='memory://')\n"
        f"app.conf.update(result_expires=None, safebeat_url='sqlite:///{tmp_path}/s.sqlite3',\n"
        "    beat_schedule={'nightly-report': {'task': 'proj.tasks.report', 'schedule': 3600}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # Not a Django project: where another test configured Django in this process, the CLI
    # would otherwise read django-celery-beat's rows too (it cannot see beat's -S).
    monkeypatch.setattr("safebeat.entries.app_entries.periodic_tasks_reason", lambda app: None)
    monkeypatch.delitem(sys.modules, "proj", raising=False)  # another test's proj


def session(block: Block) -> tuple[list[list[str]], str]:
    """The block's commands (continuation lines joined) and the lines it shows as output."""
    commands: list[list[str]] = []
    shown: list[str] = []
    pending = ""
    for line in block.text.splitlines():
        if pending or line.startswith("$ "):
            text = pending + line.removeprefix("$ ").strip()
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            args = shlex.split(text)
            assert args[0] == "safebeat", text
            commands.append(args[1:])
        else:
            shown.append(line)
    return commands, "\n".join(shown)


@pytest.mark.usefixtures("proj")
@pytest.mark.parametrize("label", ["add", "clash"])
def test_the_pages_session_prints_what_it_shows(label: str) -> None:
    """Each command of the block runs, and every output line shown is printed."""
    commands, shown = session(PAGE.block(label))
    output = ""
    for args in commands:
        result = CliRunner().invoke(main, args, terminal_width=200)
        output += result.output
    assert missing_lines(shown, output) == [], output
