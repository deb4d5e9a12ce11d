"""The table of `make bench-targets` (tests/benchmarks/bench_targets.py, judged by
tests/benchmarks/targets_judge.py) says met or missed by issue 33's figures, from each
part's JSON, and "not measured" where a part is missing: a table that said "met" for a
run that never happened would be worse than none.

The figures are saved samples (tests/benchmarks/sample_targets/), in the shape each part
writes; nothing here is timed."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.bench_targets import PARTS, load, main
from tests.benchmarks.targets_judge import Row, judge, render

SAMPLES = Path(__file__).resolve().parents[1] / "benchmarks" / "sample_targets"


@pytest.fixture
def reports() -> dict[str, dict[str, Any]]:
    return load(SAMPLES)


def row(rows: list[Row], text: str) -> Row:
    (found,) = [r for r in rows if text in r.what]
    return found


@pytest.mark.parametrize(
    ("text", "met"),
    [
        ("PostgreSQL: 10,000 due at once", True),  # 1.22x raw kombu
        ("Redis: 10,000 due at once", False),  # 1.33x
        ("SQLite: 10,000 due at once", True),  # 1.25x: the limit itself
        ("django://", "shown"),
        ("PostgreSQL: peak RSS at 100,000", False),  # the restart's 151 MiB counts
        ("PostgreSQL: peak RSS at 1,000,000", True),
        ("PostgreSQL: restart to first dispatch", False),  # 31 s
        ("Redis: restart to first dispatch", True),
        ("first registration of 1,000,000", True),  # 58 s
        ("first registration linear", True),  # 1.16x per entry
        ("PostgreSQL: an idle replica", False),  # round trips 1.2 -> 3.0/s
        ("Redis: an idle replica", True),  # CPU 0.05 -> 0.10 %: within the slack
        ("dispatch rows as with none", True),  # 1.9 ms vs 1.1: within 1 ms
        ("statements per tick", True),
        ("buffers", True),
        ("prune on a backlog", True),  # 17,273 rows/s
        ("bounded batches", True),
        ("SQLite: one runtime entry", True),
        ("PostgreSQL: one runtime entry", False),  # the add registered 100,002
        ("django-celery-beat row add/edit/remove", False),  # the add registered 100,001
        ("100,000 rows: start-up", False),  # 6.5 s vs 5.9 s
        ("an edit picked up", True),
        ("100,000 rows: peak RSS", True),
        ("PostgreSQL: 100,000 due at once, replicas", False),  # 2 replicas: 1.12x one's
        ("Redis: 100,000 due at once, replicas", True),
        ("PostgreSQL: each replica's CPU", False),  # 0.90 s per 10,000: 1.73x raw's
        ("Redis: each replica's CPU", True),  # 1.28x; the replica that sent none is fair
    ],
)
def test_each_figure_is_judged_against_the_issues_target(
    reports: dict[str, dict[str, Any]], text: str, met: bool | str | None
) -> None:
    assert row(judge(reports), text).verdict == met


def test_a_figure_just_over_its_limit_is_missed(reports: dict[str, dict[str, Any]]) -> None:
    changed = copy.deepcopy(reports)
    ours = next(s for s in changed["peers"]["burst"] if s["scheduler"] == "safebeat + SQLite")
    ours["median_seconds"] = 0.801  # 1.2516x raw kombu's 0.64 s
    changed["history"]["prune"]["sustained_rows_per_second"] = 999.0

    rows = judge(changed)

    assert row(rows, "SQLite: 10,000 due at once").verdict is False
    assert row(rows, "prune on a backlog").verdict is False


def test_a_child_that_failed_is_never_met(reports: dict[str, dict[str, Any]]) -> None:
    """A child that died, never got ready or never saw its change gives no figure, or a
    zero: never a "met"."""
    changed = copy.deepcopy(reports)
    big = next(r for r in changed["scale"]["big"] if r["size"] == 1_000_000)
    del big["restart"]["rss"]
    for idle in changed["scale"]["idle"]:
        if idle["store"] == "Redis" and idle["size"] > 1000:
            idle.update(cpu_percent=0.0, round_trips_per_second=0.0, rss_mib=0)
    add = next(c for c in changed["runtime"]["changes"] if c["store"] == "SQLite")
    add.update(registered=0, loaded=0)
    ours = next(s for s in changed["peers"]["burst"] if s["scheduler"] == "safebeat + Redis")
    ours["median_seconds"] = None  # a run over the cap

    rows = judge(changed)

    big_store = big["store"]
    assert row(rows, f"{big_store}: peak RSS at 1,000,000").verdict is None
    assert row(rows, "Redis: an idle replica").verdict is None
    assert row(rows, "SQLite: one runtime entry").verdict is False
    assert row(rows, "Redis: 10,000 due at once").verdict is False


@pytest.mark.parametrize(
    "broken",
    [
        {"sent": [50_000, 49_999]},  # a window never sent
        {"sent": [50_000, 50_001]},  # one sent twice
        {"sent": [100_000]},  # a replica that never reported
        {"ready_before_due": False},
    ],
)
def test_a_replica_burst_that_did_not_send_each_window_once_is_missed(
    reports: dict[str, dict[str, Any]], broken: dict[str, Any]
) -> None:
    run = next(
        r
        for r in reports["scale"]["replicas"]
        if r["store"] == "Redis" and r["replicas"] == 2 and r["size"] == 100_000
    )
    run.update(broken)

    assert row(judge(reports), "Redis: 100,000 due at once, replicas").verdict is False


def test_a_replicas_cpu_counts_until_it_has_nothing_due(
    reports: dict[str, dict[str, Any]],
) -> None:
    for run in reports["scale"]["replicas"]:
        if run["store"] == "Redis":
            run["cpu_until_idle"] = [cpu * 10 for cpu in run["cpu_seconds"]]

    assert row(judge(reports), "Redis: each replica's CPU").verdict is False


def test_a_prune_pass_that_emptied_the_backlog_is_a_lower_bound(
    reports: dict[str, dict[str, Any]],
) -> None:
    reports["history"]["prune"].update(deleted=0, budget_pass_rows=100_000)

    assert row(judge(reports), "prune on a backlog").figure.startswith("≥ 17,273 rows/s")


def test_the_peers_and_the_limit_are_beside_the_figures(
    reports: dict[str, dict[str, Any]],
) -> None:
    rows = judge(reports)

    burst = row(rows, "PostgreSQL: 10,000 due at once")
    assert "0.64 s" in burst.limit
    assert "stock beat > 120 s (2,195 sent)" in burst.beside
    assert "RedBeat 12.20 s" in burst.beside
    assert "django-celery-beat 5.9 s" in row(rows, "start-up").beside
    assert "raw kombu's (0.52 s)" in row(rows, "Redis: each replica's CPU").limit


def test_without_django_celery_beat_rows_their_change_is_not_measured(
    reports: dict[str, dict[str, Any]],
) -> None:
    changes = reports["runtime"]["changes"]
    reports["runtime"]["changes"] = [c for c in changes if c["store"] != "django-celery-beat rows"]

    assert row(judge(reports), "django-celery-beat row changed").verdict is None


def test_a_part_that_did_not_run_is_not_measured(tmp_path: Path) -> None:
    rows = judge(load(tmp_path))

    assert rows
    assert all(r.verdict is None for r in rows)
    assert {r.target for r in rows} == {1, 2, 3, 4, 5, 6}


def test_the_render_is_one_table_with_the_verdicts_counted(
    reports: dict[str, dict[str, Any]],
) -> None:
    rows = judge(reports)
    table, counts = render(rows).split("\n\n")

    lines = table.splitlines()
    assert len(lines) == len(rows) + 2
    assert all(line.count("|") == 7 for line in lines)
    assert "| 1 | Redis: 10,000 due at once" in table
    assert "**MISSED** |" in table
    assert counts == "19 met, 9 missed, 0 not measured, 1 shown"


def test_render_reads_the_saved_json_and_writes_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for part in PARTS:
        shutil.copy(SAMPLES / f"{part}.json", tmp_path)
    (tmp_path / "scale.json").write_text(json.dumps({}), encoding="utf-8")

    assert main(["--render", "--folder", str(tmp_path)]) == 0

    shown = capsys.readouterr().out
    assert "Issue 33's targets" in shown
    assert (tmp_path / "targets.md").read_text(encoding="utf-8").strip() in shown
    assert "| 6 | N replicas on one burst | — |  |  | not measured |" in shown
