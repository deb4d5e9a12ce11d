"""Run the chaos scenarios and print the table: every window counted, safebeat beside stock beat.

    python -m tests.chaos.report                # N = 5 replicas per store, the published table
    python -m tests.chaos.report --long         # N = 10, longer faults
    python -m tests.chaos.report --short        # what CI runs (N = 3, a few seconds each)
    python -m tests.chaos.report --json out.json --markdown --scenario kill --scenario freeze

Exits 1 if any safebeat side dispatched a window more than once, lost one without a
recorded reason, or sent a message for an instant that is no window.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.chaos.lab import OwnedPostgres
from tests.chaos.runner import MODES, STOCK, Mode, ScenarioResult, run_scenario
from tests.chaos.scenarios import BY_KEY, SCENARIOS, unavailable

COLUMNS = (
    ("scenario", "<"),
    ("store", "<"),
    ("N", ">"),
    ("windows", ">"),
    ("once", ">"),
    ("taken over", ">"),
    ("same-id copies", ">"),
    ("more than once", ">"),
    ("missing, no reason", ">"),
    ("skipped by policy", "<"),
    ("max lag", ">"),
    ("failover gap", ">"),
    ("stock beat: more than once / missing", ">"),
)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _skipped(side: dict[str, Any]) -> str:
    skipped = side["skipped_by_policy"]
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items())) or "0"


def _stock(scenario: dict[str, Any]) -> str:
    stock = next((s for s in scenario["sides"] if s["side"] == STOCK), None)
    if stock is None:
        return "not run"
    text = (
        f"{stock['dispatched_more_than_once']} / {stock['missing_without_reason']} "
        f"of {stock['expected']}"
    )
    return text if stock["fault_applies"] else f"{text} (no store)"


def rows(scenarios: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row per scenario and store, from `ScenarioResult.as_dict()` (or its JSON)."""
    table: list[tuple[str, ...]] = []
    for scenario in scenarios:
        for side in scenario["sides"]:
            if side["side"] == STOCK:
                continue
            twice = (
                side["dispatched_more_than_once"]
                + len(side["unexpected_messages"])
                + len(side["contradictions"])
            )
            table.append(
                (
                    scenario["scenario"],
                    side["side"],
                    str(side["replicas"]),
                    str(side["expected"]),
                    str(side["dispatched_once"]),
                    str(side.get("taken_over_after_claim_timeout", "-")),
                    str(side["republished_same_task_id"]),
                    str(twice),
                    str(side["missing_without_reason"]),
                    _skipped(side),
                    _seconds(side["max_lag_s"]),
                    _seconds(side["failover_gap_s"]),
                    _stock(scenario),
                )
            )
    return table


def text_table(scenarios: Sequence[dict[str, Any]]) -> str:
    body = rows(scenarios)
    widths = [max(len(c[0]), *(len(r[i]) for r in body)) for i, c in enumerate(COLUMNS)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(w) if align == "<" else cell.rjust(w)
            for cell, w, (_, align) in zip(cells, widths, COLUMNS, strict=True)
        ).rstrip()

    rule = "-" * len(line([c[0] for c in COLUMNS]))
    return "\n".join([line([c[0] for c in COLUMNS]), rule, *(line(r) for r in body), rule])


def markdown_table(scenarios: Sequence[dict[str, Any]]) -> str:
    header = "| " + " | ".join(c[0] for c in COLUMNS) + " |"
    align = "|" + "|".join("---" if a == "<" else "---:" for _, a in COLUMNS) + "|"
    return "\n".join([header, align, *("| " + " | ".join(r) + " |" for r in rows(scenarios))])


def stock_lines(scenarios: Sequence[dict[str, Any]]) -> list[str]:
    lines = []
    for scenario in scenarios:
        stock = next((s for s in scenario["sides"] if s["side"] == STOCK), None)
        if stock is None:
            continue
        ratio = stock["messages"] / stock["expected"] if stock["expected"] else 0.0
        lines.append(
            f"{scenario['scenario']}: {stock['replicas']} stock beats sent {stock['messages']} "
            f"messages for {stock['expected']} windows ({ratio:.1f}x); "
            f"{stock['dispatched_more_than_once']} windows sent more than once, "
            f"{stock['missing_without_reason']} sent by nobody"
            + ("" if stock["fault_applies"] else " (the fault does not exist for stock beat)")
        )
    return lines


def recovery_lines(scenarios: Sequence[dict[str, Any]]) -> list[str]:
    """What each side did after every replica was restarted (the long-outage scenario)."""
    lines = []
    for scenario in scenarios:
        for side in scenario["sides"]:
            recovery = side.get("recovery")
            if recovery is None:
                continue
            policies = "; ".join(
                f"{group}: {counts['as_expected']} of {counts['entries']} entries as expected, "
                f"{counts['dispatched']} windows dispatched, {counts['skipped']} skipped"
                for group, counts in recovery["policies"].items()
            )
            lines.append(
                f"{scenario['scenario']} on {side['side']}: {recovery['crontab_entries']} "
                f"crontab entries, {recovery['outage_hours']:g} h of backlog; after the "
                f"restart, first message {_seconds(recovery['first_message_s'])}, first live "
                f"window {_seconds(recovery['first_live_dispatch_s'])}, last catch-up message "
                f"{_seconds(recovery['last_catch_up_message_s'])} "
                f"({recovery['catch_up_messages']} catch-up messages); worst lag of the "
                "interval entries' live windows after the first one "
                f"{_seconds(recovery['interval_live_max_lag_s'])}; "
                f"{recovery['live_crontab_messages']} live crontab windows, worst lag "
                f"{_seconds(recovery['crontab_live_max_lag_s'])}. {policies}"
            )
    return lines


def failures(results: Sequence[ScenarioResult]) -> list[str]:
    """What breaks safebeat's promise in these results (empty when every window was once)."""
    found = []
    for result in results:
        for side in result.sides:
            if side.kind == STOCK:
                continue
            tally = side.tally
            if tally.expected == 0:
                found.append(f"{result.key}/{side.kind}: no window was due")
            if side.recovery is not None and any(
                counts["as_expected"] != counts["entries"]
                for counts in side.recovery["policies"].values()
            ):
                found.append(f"{result.key}/{side.kind}: after the outage {side.recovery}")
            if tally.problems or side.exited:
                found.append(
                    f"{result.key}/{side.kind}: {tally.more_than_once} more than once, "
                    f"missing {tally.missing[:5]}, unexpected {tally.unexpected[:5]}, "
                    f"contradictions {tally.contradictions[:5]}, replicas exited {side.exited}"
                )
    return found


def _own_claim_timeouts(report: dict[str, Any]) -> str:
    """` (broker-cut 4s)`: the scenarios that ran with a claim timeout of their own."""
    mode = report["claim_timeout_s"]
    own = [
        f"{s['scenario']} {s['claim_timeout_s']:g}s"
        for s in report["scenarios"]
        if s.get("claim_timeout_s", mode) != mode
    ]
    return f" ({', '.join(own)})" if own else ""


def print_report(report: dict[str, Any], markdown: bool) -> None:
    print(f"safebeat chaos report, mode {report['mode']}: {report['command']}")
    print(
        f"{report['cpus']} CPUs, Python {report['python']}, {report['minutes']} min; "
        f"claim timeout {report['claim_timeout_s']:g}s{_own_claim_timeouts(report)}, "
        f"lock timeout {report['lock_timeout_s']:g}s"
    )
    print()
    scenarios = report["scenarios"]
    print(markdown_table(scenarios) if markdown else text_table(scenarios))
    print()
    for line in [*stock_lines(scenarios), *recovery_lines(scenarios)]:
        print(line)
    for key, reason in report["skipped"].items():
        print(f"{key}: not run: {reason}")


def run_all(
    mode: Mode, keys: Sequence[str], folder: Path, seed: int, log: bool = True
) -> tuple[list[ScenarioResult], dict[str, str]]:
    """Run the scenarios named by `keys` in order; return the results and the skipped ones."""
    results: list[ScenarioResult] = []
    skipped: dict[str, str] = {}
    postgres = OwnedPostgres()
    try:
        for index, key in enumerate(keys):
            scenario = BY_KEY[key]
            reason = unavailable(scenario)
            if reason is not None:
                skipped[key] = reason
                if log:
                    print(f"chaos: {key}: skipped: {reason}", file=sys.stderr)
                continue
            started = time.monotonic()
            result = run_scenario(scenario, mode, folder / key, postgres, seed=seed + index)
            results.append(result)
            if log:
                print(
                    f"chaos: {key}: {time.monotonic() - started:.0f}s; "
                    + "; ".join(f"{s.kind} {s.tally.expected} windows" for s in result.sides),
                    file=sys.stderr,
                )
    finally:
        with contextlib.suppress(OSError):
            shutil.copyfile(postgres.log, folder / "postgresql-server.log")
        postgres.close()
    return results, skipped


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.report", description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--short", action="store_true", help="the CI mode: N = 3, seconds each")
    size.add_argument("--long", action="store_true", help="N = 10, longer faults")
    parser.add_argument("--json", metavar="PATH", help="also write every count as JSON")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--render", metavar="PATH", help="print the table of a --json file")
    parser.add_argument(
        "--scenario", action="append", choices=[s.key for s in SCENARIOS], help="repeatable"
    )
    parser.add_argument("--seed", type=int, default=1, help="which replicas the faults pick")
    parser.add_argument("--keep", metavar="DIR", help="keep every replica's log in DIR")
    options = parser.parse_args(argv)
    if options.render:
        print_report(json.loads(Path(options.render).read_text()), options.markdown)
        return 0
    mode = MODES["short" if options.short else "long" if options.long else "default"]
    keys = options.scenario or [s.key for s in SCENARIOS]
    arguments = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python -m tests.chaos.report", *(shlex.quote(a) for a in arguments)])
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        folder = options.keep or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="safebeat-chaos-")
        )
        results, skipped = run_all(mode, keys, Path(folder), options.seed)
    report = {
        "command": command,
        "mode": mode.name,
        "seed": options.seed,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "claim_timeout_s": mode.claim_timeout,
        "lock_timeout_s": mode.lock_timeout,
        "skipped": skipped,
        "scenarios": [result.as_dict() for result in results],
    }
    print_report(report, options.markdown)
    problems = failures(results)
    for problem in problems:
        print(f"FAILED {problem}")
    if options.json:
        Path(options.json).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
