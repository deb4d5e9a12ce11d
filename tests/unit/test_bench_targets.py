"""The targets block of `make bench-targets` (tests/benchmarks/bench_targets.py) says met or
missed by the issue's figures, from each part's JSON, and "not measured" where a part is
missing: a block that said "met" for a run that never happened would be worse than none."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks.bench_targets import targets_block

MIB = 1024 * 1024


def write(folder: Path, name: str, report: object) -> None:
    (folder / name).write_text(json.dumps(report), encoding="utf-8")


def line_of(block: str, text: str) -> str:
    (line,) = [line for line in block.splitlines() if text in line]
    return line


def test_each_figure_is_judged_against_the_issues_target(tmp_path: Path) -> None:
    write(
        tmp_path,
        "peers.json",
        {
            "targets": [
                {
                    "target": "safebeat + Redis: within 1.25x of the fastest raw publish",
                    "figure": "1.10x",
                    "met": True,
                },
                {"target": "burst rate vs stock beat at 10,000 >= 1x", "figure": "9x", "met": True},
            ]
        },
    )
    write(
        tmp_path,
        "scale.json",
        {
            "replicas": [
                {"store": "Redis", "replicas": 1, "seconds": 30.0},
                {"store": "Redis", "replicas": 2, "seconds": 25.0},
            ],
            "big": [
                {
                    "store": "Redis",
                    "size": 100_000,
                    "first": {"rss": 140 * MIB},
                    "restart": {"rss": 151 * MIB},
                },
                {
                    "store": "Redis",
                    "size": 1_000_000,
                    "first": {"rss": 900 * MIB},
                    "restart": {"rss": 800 * MIB},
                    "restart_to_dispatch": 31.0,
                },
            ],
            "idle": [
                {
                    "store": "Redis",
                    "size": 1_000,
                    "cpu_percent": 0.05,
                    "round_trips_per_second": 1.2,
                },
                {
                    "store": "Redis",
                    "size": 1_000_000,
                    "cpu_percent": 0.10,
                    "round_trips_per_second": 1.2,
                },
            ],
        },
    )
    write(
        tmp_path,
        "backlog.json",
        {
            "entries": 5000,
            "rewind": "12:00:00",
            "recovery": {"today": {"seconds": 1.3, "ticks": 1, "sent": 5000, "cap": 120}},
        },
    )

    block = targets_block(tmp_path)

    assert "met" in line_of(block, "within 1.25x")
    assert "stock beat" not in block  # only the raw-publish targets belong to target 1
    assert "MISSED" in line_of(block, "2 replicas")  # 1.20x < 1.4x
    assert "MISSED" in line_of(block, "<= 150 MiB")  # the restart's 151 MiB counts
    assert "met" in line_of(block, "<= 1024 MiB")
    assert "MISSED" in line_of(block, "restart to first dispatch")
    assert "met" in line_of(block, "idle cost")  # 0.05 -> 0.10 %: within the slack
    assert "met" in line_of(block, "backlog")
    assert "not measured" in line_of(block, "edit pick-up")


def test_a_part_that_did_not_run_is_not_measured(tmp_path: Path) -> None:
    block = targets_block(tmp_path)

    assert "met" not in block.replace("not measured", "")
    judged = [line.strip() for line in block.splitlines() if line.startswith("  ")]
    assert len(judged) == 5
    assert all(line.startswith("not measured") for line in judged)
