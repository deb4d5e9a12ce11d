"""Issue 19's five performance targets, measured in one run: prints the five tables and says
met or missed for each target. Nothing passes or fails on a number.

It runs, one after the other on this machine, as processes of their own:

1. `bench_peers.py --scenarios burst --sizes 10000`: 10,000 entries due at one instant,
   safebeat on every store beside stock beat, django-celery-beat, RedBeat, Celery's
   `send_task` and the raw kombu publish rows (the limit);
2. `bench_scale.py --scenarios replicas,big,idle,dcb`: a 100,000-window burst with 1, 2
   and 3 replicas; one replica with 100,000 and 1,000,000 entries; an idle replica with
   1,000 and 1,000,000 entries; django-celery-beat's rows at 10,000 and 100,000;
3. `bench_backlog.py`: 5,000 minutely crontab entries after 12 h of backlog on PostgreSQL.

    make bench-targets
    .venv/bin/python tests/benchmarks/bench_targets.py --big-sizes 100000,300000 \\
        --idle-sizes 1000,100000          # shorter: the 1,000,000 runs take the longest

Output: each part's tables on stdout and in `.bench/targets/<part>.out`, its JSON beside
them, and the targets block last (also in `.bench/targets/targets.txt`; `--render` prints
it again from the saved JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024

#: What the issue asks for, and how each figure is judged.
BURST_RATIO = 1.25  # 10,000 due: time within this multiple of the raw kombu row
REPLICA_SPEEDUP = 1.4  # 2 replicas against 1
RSS_SMALL_MIB, RSS_BIG_MIB = 150, 1024  # peak RSS at 100,000 and at 1,000,000 entries
RESTART_SECONDS = 30.0  # restart to first dispatch at 1,000,000
#: "Independent of the entry count": the largest idle size costs at most this multiple of
#: the smallest's CPU and round trips, or at most the slack above them (noise at ~0 %).
IDLE_RATIO, IDLE_CPU_SLACK, IDLE_TRIPS_SLACK = 1.5, 0.1, 0.2
RECOVERY_SECONDS = 5.0  # "within a few seconds" of the store returning


def run_part(name: str, argv: list[str], folder: Path) -> str:
    """Run one benchmark script; return what it printed (also echoed as it runs)."""
    command = [sys.executable, str(HERE / argv[0]), *argv[1:]]
    print(f"\n== {name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    found = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    print(found.stdout, flush=True)
    took = time.monotonic() - started
    (folder / f"{name}.out").write_text(found.stdout, encoding="utf-8")
    if found.returncode:
        print(f"{name} exited with {found.returncode} after {took:.0f} s", file=sys.stderr)
    return f"{name} ({took / 60:.1f} min)"


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text())) if path.exists() else {}


#: A figure's verdict: met, missed, not measured, or "measured" (a target with no figure to meet).
Verdict = bool | None | str


def verdict(met: Verdict) -> str:
    return (
        met if isinstance(met, str) else {True: "met", False: "MISSED", None: "not measured"}[met]
    )


def burst_targets(peers: dict[str, Any]) -> list[tuple[str, str, Verdict]]:
    return [
        (t["target"], t["figure"], t["met"])
        for t in peers.get("targets", [])
        if "raw publish" in t["target"]
    ] or [("10,000 due within 1.25x raw kombu", "no figure", None)]


def replica_targets(scale: dict[str, Any]) -> list[tuple[str, str, Verdict]]:
    rows = scale.get("replicas", [])
    found = []
    for store in sorted({r["store"] for r in rows}):
        seconds = {r["replicas"]: r["seconds"] for r in rows if r["store"] == store}
        one, two = seconds.get(1), seconds.get(2)
        target = f"{store}: 2 replicas >= {REPLICA_SPEEDUP:g}x one on the burst"
        if one and two:
            found.append(
                (
                    target,
                    f"{one / two:.2f}x ({one:.1f} s -> {two:.1f} s)",
                    one / two >= REPLICA_SPEEDUP,
                )
            )
        else:
            found.append((target, "a run stalled or was not made", None))
    return found


def big_targets(scale: dict[str, Any]) -> list[tuple[str, str, Verdict]]:
    found: list[tuple[str, str, Verdict]] = []
    for r in scale.get("big", []):
        peak = max(r["first"].get("rss", 0), r["restart"].get("rss", 0)) / MIB
        limit = (
            RSS_SMALL_MIB
            if r["size"] <= 100_000
            else RSS_BIG_MIB
            if r["size"] >= 1_000_000
            else None
        )
        if limit is not None:
            found.append(
                (
                    f"{r['store']}: peak RSS <= {limit} MiB at {r['size']:,}",
                    f"{peak:.0f} MiB",
                    peak <= limit,
                )
            )
        if r["size"] >= 1_000_000:
            restart = r.get("restart_to_dispatch")
            found.append(
                (
                    f"{r['store']}: restart to first dispatch <= {RESTART_SECONDS:g} s "
                    f"at {r['size']:,}",
                    "—" if restart is None else f"{restart:.1f} s",
                    None if restart is None else restart <= RESTART_SECONDS,
                )
            )
    idle = scale.get("idle", [])
    for store in sorted({r["store"] for r in idle}):
        rows = sorted((r for r in idle if r["store"] == store), key=lambda r: r["size"])
        if len(rows) < 2:
            continue
        small, large = rows[0], rows[-1]
        cpu_ok = large["cpu_percent"] <= max(
            small["cpu_percent"] * IDLE_RATIO, small["cpu_percent"] + IDLE_CPU_SLACK
        )
        trips = small["round_trips_per_second"]
        trips_ok = large["round_trips_per_second"] <= max(
            trips * IDLE_RATIO, trips + IDLE_TRIPS_SLACK
        )
        found.append(
            (
                f"{store}: idle cost at {large['size']:,} entries as at {small['size']:,}",
                f"CPU {small['cpu_percent']:.2f} -> {large['cpu_percent']:.2f} %, "
                f"round trips {trips:.2f} -> {large['round_trips_per_second']:.2f}/s",
                cpu_ok and trips_ok,
            )
        )
    return found


def recovery_target(backlog: dict[str, Any]) -> list[tuple[str, str, Verdict]]:
    today = backlog.get("recovery", {}).get("today")
    target = (
        f"{backlog.get('entries', 5000):,} minutely crontabs after {backlog.get('rewind', '12h')} "
        f"of backlog: dispatched within {RECOVERY_SECONDS:g} s"
    )
    if not today:
        return [(target, "not measured", None)]
    seconds = today["seconds"]
    figure = (
        f"{seconds:.2f} s ({today['ticks']} ticks)"
        if seconds is not None
        else f"> {today['cap']:.0f} s"
    )
    return [(target, figure, seconds is not None and seconds <= RECOVERY_SECONDS)]


def dcb_target(scale: dict[str, Any]) -> list[tuple[str, str, Verdict]]:
    rows = scale.get("dcb", [])
    sizes = sorted({r["size"] for r in rows})
    figure = ", ".join(f"{n:,} rows" for n in sizes) or "not measured"
    return [
        (
            "django-celery-beat rows: start-up, edit pick-up, RSS beside its own scheduler",
            figure,
            "measured" if rows else None,
        )
    ]


def targets_block(folder: Path) -> str:
    peers, scale, backlog = (
        load(folder / name) for name in ("peers.json", "scale.json", "backlog.json")
    )
    groups = {
        "1. 10,000 due at once": burst_targets(peers),
        "2. throughput with replicas": replica_targets(scale),
        "3. a big schedule on one replica": big_targets(scale),
        "4. recovery after a long outage": recovery_target(backlog),
        "5. django-celery-beat rows (measured, no figure to meet)": dcb_target(scale),
    }
    lines = ["Targets (this run)"]
    for title, rows in groups.items():
        lines.append(title)
        if not rows:
            lines.append(f"  {verdict(None):>12}  (this part was not run or printed no figure)")
        lines.extend(f"  {verdict(met):>12}  {target}: {figure}" for target, figure, met in rows)
    return "\n".join(lines)


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--big-sizes", default="100000,1000000")
    parser.add_argument("--idle-sizes", default="1000,1000000")
    parser.add_argument("--dcb-sizes", default="10000,100000")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each burst kind")
    parser.add_argument("--cap", type=float, default=120.0, help="longest 10,000 burst run (s)")
    parser.add_argument("--parts", default="peers,scale,backlog")
    parser.add_argument("--folder", type=Path, default=ROOT / ".bench" / "targets")
    parser.add_argument(
        "--render", action="store_true", help="measure nothing: print the targets of the saved JSON"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_options(argv)
    folder: Path = opts.folder
    folder.mkdir(parents=True, exist_ok=True)
    parts = opts.parts.split(",")
    done = []
    if not opts.render:
        print(f"cores: {os.cpu_count()}; load average before: {os.getloadavg()}", flush=True)
        if "peers" in parts:
            done.append(
                run_part(
                    "peers",
                    [
                        "bench_peers.py",
                        "--scenarios",
                        "burst",
                        "--sizes",
                        "10000",
                        "--repeats",
                        str(opts.repeats),
                        "--cap",
                        str(opts.cap),
                        "--json",
                        str(folder / "peers.json"),
                        "--plot",
                        str(folder / "peers.png"),
                    ],
                    folder,
                )
            )
        if "scale" in parts:
            done.append(
                run_part(
                    "scale",
                    [
                        "bench_scale.py",
                        "--scenarios",
                        "replicas,big,idle,dcb",
                        "--big-sizes",
                        opts.big_sizes,
                        "--idle-sizes",
                        opts.idle_sizes,
                        "--dcb-sizes",
                        opts.dcb_sizes,
                        "--json",
                        str(folder / "scale.json"),
                    ],
                    folder,
                )
            )
        if "backlog" in parts:
            done.append(
                run_part(
                    "backlog",
                    [
                        "bench_backlog.py",
                        "--repeats",
                        "1",
                        "--cap",
                        "120",
                        "--countings",
                        "today",
                        "--backlogs",
                        "12h",
                        "--json",
                        str(folder / "backlog.json"),
                    ],
                    folder,
                )
            )
        print(f"\nparts: {', '.join(done)}; load average after: {os.getloadavg()}")
    block = targets_block(folder)
    print(f"\n{block}")
    (folder / "targets.txt").write_text(block + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
