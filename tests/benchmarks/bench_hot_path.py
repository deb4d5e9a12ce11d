"""CPU of beat's hot path per 10,000 windows due at one instant, without a store or broker.

A burst's end-to-end CPU moves by a third from run to run on a machine other work shares;
the least of many runs of each piece in one process moves by a few percent. This measures
the pieces a claim round and its publish run per window, in process CPU seconds (least of
`--repeats` runs):

- `plan_tick` for N interval entries due at once (windows, task ids, claims, advances);
- `state_of_row` for N rows as PostgreSQL returns them;
- `Publisher.send` per window, cold (the first window of each entry: its plan and message
  template built) and warm (templates kept), to a producer that publishes nothing;
- `Publisher.prewarm` of N entries (their templates built between ticks, ahead of their
  windows), and `Publisher.send` of their first windows after it ("send, prewarmed").

Compare two checkouts by running it from each, alternating.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from celery import Celery  # noqa: E402

from safebeat.beat.planning import plan_tick  # noqa: E402
from safebeat.beat.publishing import Publisher  # noqa: E402
from safebeat.config import Config  # noqa: E402
from safebeat.entries import Entry, compile_entry  # noqa: E402
from safebeat.identity import task_id_for  # noqa: E402
from safebeat.records import Claim, EntryState  # noqa: E402
from safebeat.stores.decoding import state_of_row  # noqa: E402

UTC = timezone.utc
ANCHOR = datetime(2026, 3, 1, 12, tzinfo=UTC)
#: A state row's pause end and note, and its live run's four columns: none.
NO_RUN = (None,) * 6
RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0, "interval_max": 0}


class _Connection:
    def _reraise_as_library_errors(self) -> nullcontext[None]:
        return nullcontext()


class _Producer:
    """Takes each message and sends nothing: what is left is safebeat's own work."""

    connection = _Connection()

    def publish(self, body: Any, **options: Any) -> None:
        pass


def least(run: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best


def entries_of(size: int) -> dict[str, Entry]:
    config = Config(namespace="bench")
    return {
        name: compile_entry(
            name,
            {"task": "bench.task", "schedule": 5.0, "args": [i]},
            app_timezone=UTC,
            config=config,
        )
        for i in range(size)
        for name in [f"bench-{i:06d}"]
    }


def measure(size: int, repeats: int) -> dict[str, float]:
    entries = entries_of(size)
    states = {
        name: EntryState(name, ANCHOR, ANCHOR, ANCHOR + timedelta(seconds=50), "d", "every 5s")
        for name in entries
    }
    now = ANCHOR + timedelta(seconds=55, milliseconds=3)

    def plan() -> object:
        return plan_tick(entries, states, now, namespace="bench", retry_after=timedelta(seconds=5))

    window = ANCHOR + timedelta(seconds=55)
    rows = [
        (name, ANCHOR, ANCHOR, ANCHOR, "d", "s", False, *NO_RUN, ANCHOR, ANCHOR, None)
        for name in entries
    ]
    app = Celery("bench", broker="memory://", set_as_current=False)

    @app.task(name="bench.task", shared=False)
    def task(x: int) -> None: ...

    sends = [
        (entry, Claim(1, name, window, task_id_for("bench", name, window), 1))
        for name, entry in entries.items()
    ]
    producer, publisher = _Producer(), Publisher(app)

    def cold() -> None:
        nonlocal publisher
        publisher = Publisher(app)
        publisher.plan_cache_size = size
        warm()

    def warm() -> None:
        for entry, claim in sends:
            publisher.send(producer, entry, claim, retry_policy=RETRY)

    def prewarm() -> None:
        nonlocal publisher
        publisher = Publisher(app)
        publisher.plan_cache_size = size
        for entry in entries.values():
            publisher.prewarm(entry)

    def prewarmed() -> float:
        prewarm()  # outside the time taken: beat does it between ticks
        gc.collect()
        started = time.process_time()
        warm()
        return time.process_time() - started

    per = 10_000 / size
    return {
        "plan_tick": least(plan, repeats) * per,
        "states from rows": least(lambda: {r[0]: state_of_row(r) for r in rows}, repeats) * per,
        "send, cold": least(cold, repeats) * per,
        "send, warm": least(warm, repeats) * per,
        "prewarm": least(prewarm, repeats) * per,
        "send, prewarmed": min(prewarmed() for _ in range(repeats)) * per,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    figures = measure(args.size, args.repeats)
    print(f"CPU seconds per 10,000 windows (least of {args.repeats} runs of {args.size:,}):")
    for name, seconds in figures.items():
        print(f"  {name:<18} {seconds * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
