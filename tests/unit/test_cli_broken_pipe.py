"""A reader that leaves early (`safebeat status | head`) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("args", [["plan", "--help"], ["migrate"]], ids=["help", "migrate"])
def test_a_closed_stdout_ends_the_command_without_an_error_line(
    tmp_path: Path, args: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    command = [sys.executable, "-m", "safebeat", "--url", url, *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # the reader is gone before the first line is written
    said = process.stderr.read().decode()
    assert process.wait(timeout=60) == 1
    assert said == ""
