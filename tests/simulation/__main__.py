"""Run the simulation over many seeds, or replay one.

    python -m tests.simulation --seeds 1000          # seeds 0..999, progress as it goes
    python -m tests.simulation --seed 4242           # replay one seed, with its trace
    python -m tests.simulation --seeds 100 --first 5000 --faults beat-term,store-fail
    python -m tests.simulation --seeds 50 --store postgres   # the same histories, real SQL
    python -m tests.simulation --seed 7 --reopen "hole 1"    # a fixed hole put back: found?

A history depends on string hashing order too, so the runner fixes PYTHONHASHSEED (it
starts itself again with PYTHONHASHSEED=0 when it is not set).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

REPLAY = "PYTHONHASHSEED=0 .venv/bin/python -m tests.simulation --seed {seed}{faults}{store}"


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        argv_again = [sys.executable, "-m", "tests.simulation", *sys.argv[1:]]
        os.execv(sys.executable, argv_again)  # noqa: S606 - this program, fixed hash seed
    parser = argparse.ArgumentParser(prog="python -m tests.simulation")
    parser.add_argument("--seed", type=int, help="replay this seed and print its trace")
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--faults", help="only these fault kinds (comma-separated)")
    parser.add_argument(
        "--store",
        default="memory",
        help="the store the histories run against: memory (fastest), sqlite, postgres, redis",
    )
    parser.add_argument("--stop", action="store_true", help="stop at the first failing seed")
    parser.add_argument("--trace", type=int, default=60, help="trace lines shown per failure")
    parser.add_argument(
        "--reopen",
        action="append",
        default=[],
        metavar="HOLE",
        help="put a fixed hole of issue 29 back in this process ('hole 1' .. 'hole 5'), "
        "to see that a seed finds it",
    )
    parser.add_argument(
        "--known",
        action="append",
        default=[],
        help="a diagnosis (its start, e.g. 'hole 3') reported but not failing the run",
    )
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)
    from tests.simulation.backends import STORES
    from tests.simulation.reopen import HOLES
    from tests.simulation.world import FAULT_KINDS, Violation, choose, diagnose, simulate

    if args.store not in STORES:
        parser.error(f"unknown store {args.store!r}; known: {', '.join(STORES)}")
    store_arg = f" --store {args.store}" if args.store != "memory" else ""

    kinds = tuple(args.faults.split(",")) if args.faults else None
    if kinds is not None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
    unknown_holes = set(args.reopen) - set(HOLES)
    if unknown_holes:
        parser.error(f"unknown holes {sorted(unknown_holes)}; known: {', '.join(HOLES)}")
    reopen = tuple(args.reopen)
    faults_arg = f" --faults {args.faults}" if args.faults else ""
    faults_arg += "".join(f" --reopen '{hole}'" for hole in reopen)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    failed: list[tuple[int, str]] = []
    found: dict[str, int] = {}
    started = last = time.monotonic()
    for done, seed in enumerate(seeds, 1):
        try:
            world = simulate(seed, choose(seed, kinds), store=args.store, reopen=reopen)
        except Violation as exc:
            failed.append((seed, str(exc)))
            world = exc.world  # type: ignore[attr-defined]
            label = diagnose(world, exc)
            found.setdefault(label, seed)
            if any(label.startswith(known) for known in args.known):
                print(f"seed {seed} known [{label}]: {exc}")
                failed.pop()
                continue
            print(f"seed {seed} FAILED [{label}]: {exc}")
            print(f"  settings: {world.s}")
            for line in world.lines[-args.trace :]:
                print(f"  {line}")
            print(f"  replay: {REPLAY.format(seed=seed, faults=faults_arg, store=store_arg)}")
            if args.stop:
                break
        else:
            if args.seed is not None:
                print(f"seed {seed} passed; faults {world.faults_seen}")
                for line in world.lines[-args.trace :]:
                    print(f"  {line}")
        now = time.monotonic()
        if now - last >= 10 or done == len(seeds):
            last = now
            print(
                f"{done}/{len(seeds)} seeds, {len(failed)} failed, {now - started:.0f}s "
                f"({(now - started) / done:.2f}s a seed, {args.store} store)",
                flush=True,
            )
    if failed:
        print("failing seeds: " + " ".join(str(seed) for seed, _ in failed))
        for label, seed in sorted(found.items()):
            print(f"first seed of {label}: {seed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
