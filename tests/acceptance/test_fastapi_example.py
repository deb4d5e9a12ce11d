"""examples/fastapi_apscheduler: three uvicorn replicas of the FastAPI app per side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.harness import ROOT

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]


def test_the_fastapi_example_sends_one_report_per_window(tmp_path: Path) -> None:
    """The example's own check passes: stock APScheduler sends each report from every
    replica, safebeat's executor from one, each recipient mailed once per window."""
    result = subprocess.run(
        [sys.executable, "examples/fastapi_apscheduler/run.py", "--seconds", "5",
         "--recipients", "50", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    stock, safe = summary["stock"], summary["safebeat"]
    assert safe["windows"] >= 2
    assert safe["reports"] == safe["windows"]
    assert safe["mails"] == 50 * safe["windows"]
    assert stock["reports"] == 3 * stock["windows"]
    assert "safebeat: " in result.stdout
