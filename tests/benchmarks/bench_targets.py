"""Issue 33's six performance targets, measured in one run: prints one table that says met or
missed for each, beside raw kombu, stock beat, django-celery-beat and RedBeat. Nothing
passes or fails on a number.

It runs, one after the other on this machine, as processes of their own:

1. peers: `bench_peers.py --scenarios burst --sizes 10000`: 10,000 entries due at one
   instant, safebeat on SQLite, PostgreSQL, Redis and django:// beside stock beat,
   django-celery-beat, RedBeat and raw kombu batched publishing (the limit; its CPU is the
   raw publisher's, for target 6);
2. scale: `bench_scale.py --scenarios replicas,big,idle,dcb`: a 100,000-window burst with
   1 to 5 replicas (seconds, and each replica's CPU); one replica with 100,000 and
   1,000,000 entries (peak RSS, first registration, restart to first dispatch); an idle
   replica with 1,000 and 1,000,000 entries (CPU, store round trips); safebeat's and
   django-celery-beat's DatabaseScheduler over 100,000 rows;
3. history: `bench_history.py`: ticks of a namespace with 10,000,000 dispatch rows beside
   an empty one on PostgreSQL (time, statements, buffers), and prune on a backlog;
4. runtime: `bench_runtime_change.py --entries 100000`: one runtime entry added, edited and
   removed among 100,000, on SQLite and PostgreSQL, and one django-celery-beat row among
   100,000 under safebeat's DatabaseScheduler.

    make bench-targets                                        # about 1.5 hours
    .venv/bin/python tests/benchmarks/bench_targets.py --quick    # small sizes, ~10 minutes
    .venv/bin/python tests/benchmarks/bench_targets.py --parts history,runtime
    .venv/bin/python tests/benchmarks/bench_targets.py --render   # the table again

Output: each part's tables in `.bench/targets/<part>.out` and its JSON beside them (a
`--quick` run: `.bench/targets-quick/`), then the targets table (also `targets.md`).
`--quick` checks the harness, not the targets: its sizes are far below the issue's, and
each row names the size it measured.
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
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from tests.benchmarks.targets_judge import judge, render  # noqa: E402

HERE = Path(__file__).resolve().parent
PARTS = ("peers", "scale", "history", "runtime")

#: Each part's sizes: the issue's, and --quick's.
FULL = {
    "sizes": "10000",
    "repeats": "3",
    "cap": "120",
    "burst": "100000",
    "replicas": "1,2,3,4,5",
    "big_sizes": "100000,1000000",
    "idle_sizes": "1000,1000000",
    "idle_seconds": "20",
    "dcb_sizes": "100000",
    "rows": "10000000",
    "ticks": "30",
    "prune_rows": "1000000",
    "entries": "100000",
}
QUICK = {
    **FULL,
    "sizes": "1000",
    "repeats": "1",
    "cap": "30",
    "burst": "2000",
    "replicas": "1,2,3",
    "big_sizes": "2000,20000",
    "idle_sizes": "100,10000",
    "idle_seconds": "5",
    "dcb_sizes": "2000",
    "rows": "200000",
    "ticks": "10",
    "prune_rows": "100000",
    "entries": "5000",
}


def commands(sizes: dict[str, str], folder: Path) -> dict[str, list[str]]:
    """Each part's script and arguments."""
    return {
        "peers": [
            "bench_peers.py",
            "--scenarios=burst",
            f"--sizes={sizes['sizes']}",
            f"--repeats={sizes['repeats']}",
            f"--cap={sizes['cap']}",
            f"--json={folder / 'peers.json'}",
            f"--plot={folder / 'peers.png'}",
        ],
        "scale": [
            "bench_scale.py",
            "--scenarios=replicas,big,idle,dcb",
            f"--burst={sizes['burst']}",
            f"--replicas={sizes['replicas']}",
            f"--big-sizes={sizes['big_sizes']}",
            f"--idle-sizes={sizes['idle_sizes']}",
            f"--idle-seconds={sizes['idle_seconds']}",
            f"--dcb-sizes={sizes['dcb_sizes']}",
            f"--json={folder / 'scale.json'}",
        ],
        "history": [
            "bench_history.py",
            f"--rows={sizes['rows']}",
            f"--ticks={sizes['ticks']}",
            f"--prune-rows={sizes['prune_rows']}",
            f"--json={folder / 'history.json'}",
        ],
        "runtime": [
            "bench_runtime_change.py",
            f"--entries={sizes['entries']}",
            "--stores=sqlite,postgres,django",
            f"--json={folder / 'runtime.json'}",
        ],
    }


def run_part(name: str, argv: list[str], folder: Path) -> str:
    """Run one benchmark script; return its name and minutes (what it printed is echoed
    and kept in `<name>.out`)."""
    (folder / f"{name}.json").unlink(missing_ok=True)  # no figure of an earlier run is judged
    command = [sys.executable, str(HERE / argv[0]), *argv[1:]]
    print(f"\n== {name}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    found = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    print(found.stdout, flush=True)
    took = time.monotonic() - started
    (folder / f"{name}.out").write_text(found.stdout, encoding="utf-8")
    if found.returncode:
        print(f"{name} exited with {found.returncode} after {took:.0f} s", file=sys.stderr)
    return f"{name} {took / 60:.1f} min"


def load(folder: Path) -> dict[str, dict[str, Any]]:
    """Each part's JSON in `folder` ({} for a part that wrote none)."""
    found = {}
    for name in PARTS:
        path = folder / f"{name}.json"
        found[name] = dict(json.loads(path.read_text(encoding="utf-8"))) if path.exists() else {}
    return found


def parse_options(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: checks the harness in minutes"
    )
    parser.add_argument("--parts", default=",".join(PARTS), help=",".join(PARTS))
    parser.add_argument("--folder", type=Path, help="default .bench/targets(-quick)")
    parser.add_argument(
        "--render", action="store_true", help="measure nothing: the table of the saved JSON"
    )
    for key, value in FULL.items():
        parser.add_argument(
            f"--{key.replace('_', '-')}", dest=key, help=f"default {value} (--quick: {QUICK[key]})"
        )
    opts = parser.parse_args(argv)
    unknown = set(opts.parts.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)}; choose from {','.join(PARTS)}")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_options(argv)
    base = QUICK if opts.quick else FULL
    sizes = {key: getattr(opts, key) or value for key, value in base.items()}
    folder: Path = opts.folder or ROOT / ".bench" / ("targets-quick" if opts.quick else "targets")
    folder.mkdir(parents=True, exist_ok=True)
    header = ""
    if not opts.render:
        header = (
            f"{os.cpu_count()} cores; load average before: "
            + " ".join(f"{x:.2f}" for x in os.getloadavg())
            + ("; QUICK RUN (sizes far below the issue's)" if opts.quick else "")
        )
        print(header, flush=True)
        argvs = commands(sizes, folder)
        done = [run_part(name, argvs[name], folder) for name in opts.parts.split(",")]
        header += f"\nparts: {', '.join(done)}; load average after: " + " ".join(
            f"{x:.2f}" for x in os.getloadavg()
        )
        saved = folder / "header.txt"
        if len(done) < len(PARTS) and saved.exists():  # the other parts' figures are older
            header = saved.read_text(encoding="utf-8").strip() + "\nagain: " + header
        saved.write_text(header + "\n", encoding="utf-8")
    elif (folder / "header.txt").exists():
        header = (folder / "header.txt").read_text(encoding="utf-8").strip()
    table = f"Issue 33's targets (this run)\n{header}\n\n{render(judge(load(folder)))}"
    print(f"\n{table}")
    (folder / "targets.md").write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
