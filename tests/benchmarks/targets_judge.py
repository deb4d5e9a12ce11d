"""Issue 33's six targets, judged from the JSON of one `make bench-targets` run.

`judge(reports)` turns each part's figures into rows (target, figure, limit, what it is
beside, verdict); `render(rows)` prints them as one Markdown table. Nothing here measures:
bench_targets.py runs the parts and hands their JSON over, and a unit test hands over
saved samples. A target whose part did not run, or printed no figure, is "not measured",
never "met".
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tests.benchmarks.bench_peers import LIMIT_KOMBU
from tests.benchmarks.bench_runtime_change import DCB_ROWS
from tests.benchmarks.peers import DCB, DJANGO, POSTGRES, REDBEAT, REDIS, SQLITE, STOCK

MIB = 1024 * 1024
#: 1. A burst's time at most this multiple of raw kombu's (batched `producer.publish`).
BURST_RATIO = 1.25
#: 2. Peak RSS at 100,000 and at 1,000,000 entries; restart to first dispatch and the first
#: registration on PostgreSQL at 1,000,000; "linear": seconds per entry at the largest size
#: at most this multiple of the smallest size's.
RSS_SMALL_MIB, RSS_BIG_MIB = 150, 1024
SMALL, BIG = 100_000, 1_000_000
RESTART_SECONDS, REGISTER_SECONDS, LINEAR_RATIO = 30.0, 60.0, 1.5
#: "Independent of the entry count": the largest idle size costs at most this multiple of
#: the smallest's CPU and round trips, or at most the slack above them (noise at ~0 %).
IDLE_RATIO, IDLE_CPU_SLACK, IDLE_TRIPS_SLACK = 1.5, 0.1, 0.2
#: 3. The full namespace's tick within this multiple of the empty one's, or this many
#: seconds above it (a tick of a few milliseconds is within the machine's noise); its
#: `load_states` reads at most this multiple of the empty one's buffers.
TICK_RATIO, TICK_SLACK, BUFFERS_RATIO = 1.25, 0.001, 1.5
#: Prune: rows a second beat sustains on a backlog (a namespace writing 1,000 windows a
#: second), and the longest one batch's transaction may hold the table.
PRUNE_RATE, PRUNE_BATCH_SECONDS = 1000.0, 1.0
#: 6. N replicas' burst at most this multiple of one's (the machine's noise between runs);
#: each replica's CPU per 10,000 windows at most this multiple of the raw publisher's.
REPLICA_SLACK, REPLICA_CPU_RATIO = 1.1, 1.3
PER_WINDOWS = 10_000

#: A verdict: met (True), missed (False), not measured (None), or "shown" (beside, not judged).
Verdict = bool | None | str
VERDICTS = {True: "met", False: "**MISSED**", None: "not measured"}


@dataclass
class Row:
    target: int
    what: str
    figure: str
    limit: str
    verdict: Verdict
    beside: str = ""


def secs(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f} s"


def median_of(values: Iterable[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def at_most(figure: float | None, limit: float) -> bool | None:
    return None if figure is None else figure <= limit


# --- 1. a burst beside raw kombu and the peers ---------------------------------------------


def burst_size(peers: dict[str, Any]) -> int | None:
    sizes = [s["entries"] for s in peers.get("burst", [])]
    return 10_000 if 10_000 in sizes else max(sizes, default=None)


def burst_of(peers: dict[str, Any], kind: str, size: int | None) -> dict[str, Any] | None:
    return next(
        (s for s in peers.get("burst", []) if s["scheduler"] == kind and s["entries"] == size),
        None,
    )


def burst_figure(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "not run"
    if summary["median_seconds"] is not None:
        return secs(summary["median_seconds"], 2)
    sent = summary.get("entries_sent_by_cap") or 0
    return f"> {summary['cap']:.0f} s ({sent:,} sent)"


def raw_kombu(peers: dict[str, Any]) -> tuple[float | None, float | None]:
    """Raw kombu's burst seconds and CPU seconds per 10,000 windows (medians of its runs)."""
    size = burst_size(peers)
    limit = burst_of(peers, LIMIT_KOMBU, size)
    if limit is None or not size:
        return None, None
    cpu = median_of(r.get("cpu_seconds") for r in limit["runs"])
    return limit["median_seconds"], None if cpu is None else cpu * PER_WINDOWS / size


def burst_targets(peers: dict[str, Any]) -> list[Row]:
    size = burst_size(peers)
    limit, _ = raw_kombu(peers)
    shown = f"{size or 10_000:,}"
    beside = "; ".join(
        f"{name} {burst_figure(burst_of(peers, kind, size))}"
        for kind, name in ((STOCK, "stock beat"), (DCB, "django-celery-beat"), (REDBEAT, "RedBeat"))
    )
    rows: list[Row] = []
    for kind, store in ((POSTGRES, "PostgreSQL"), (REDIS, "Redis"), (SQLITE, "SQLite")):
        ours = burst_of(peers, kind, size)
        seconds = None if ours is None else ours["median_seconds"]
        ratio = seconds / limit if seconds is not None and limit else None
        met = at_most(ratio, BURST_RATIO)
        if ours is not None and ours.get("runs") and seconds is None:
            met = False  # it ran, and a run did not finish within the cap
        rows.append(
            Row(
                1,
                f"{store}: {shown} due at once, time vs raw kombu",
                burst_figure(ours) if ratio is None else f"{ratio:.2f}x ({burst_figure(ours)})",
                f"≤ {BURST_RATIO:g}x raw kombu ({secs(limit, 2)})",
                met,
                "" if rows else beside,  # the peers once, on the first row
            )
        )
    ours = burst_of(peers, DJANGO, size)
    if ours is not None and ours["median_seconds"] is not None and limit:
        rows.append(
            Row(
                1,
                f"django:// (PostgreSQL through Django): {shown} due at once",
                f"{ours['median_seconds'] / limit:.2f}x ({burst_figure(ours)})",
                f"{BURST_RATIO:g}x raw kombu, not asked of django://",
                "shown",
            )
        )
    return rows


# --- 2. a million entries on one replica ---------------------------------------------------


def peak_mib(row: dict[str, Any]) -> float | None:
    """The higher of the first start's and the restart's peak; None if either child gave none."""
    peaks = [row["first"].get("rss"), row["restart"].get("rss")]
    if not all(peaks):
        return None
    return float(max(peaks)) / MIB


def big_targets(scale: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    big = scale.get("big", [])
    for store in sorted({r["store"] for r in big}):
        runs = sorted((r for r in big if r["store"] == store), key=lambda r: r["size"])
        small, large = runs[0], runs[-1]
        for run, limit, asked in ((large, RSS_BIG_MIB, BIG), (small, RSS_SMALL_MIB, SMALL)):
            if run is small and small is large:
                continue
            peak = peak_mib(run)
            rows.append(
                Row(
                    2,
                    f"{store}: peak RSS at {run['size']:,} entries" + asked_at(run, asked),
                    "—"
                    if peak is None
                    else f"{peak:,.0f} MiB (restart {run['restart']['rss'] / MIB:,.0f})",
                    f"≤ {limit:,} MiB",
                    at_most(peak, limit),
                )
            )
        restart = large.get("restart_to_dispatch")
        rows.append(
            Row(
                2,
                f"{store}: restart to first dispatch at {large['size']:,}" + asked_at(large, BIG),
                secs(restart),
                f"≤ {RESTART_SECONDS:g} s",
                at_most(restart, RESTART_SECONDS),
            )
        )
        if store == "PostgreSQL":
            rows += registration_targets(small, large)
    rows += idle_targets(scale.get("idle", []))
    return rows or [Row(2, "a large schedule on one replica", "—", "", None)]


def asked_at(run: dict[str, Any], size: int) -> str:
    return "" if run["size"] == size else f" (asked at {size:,})"


def registration_targets(small: dict[str, Any], large: dict[str, Any]) -> list[Row]:
    seconds = large["first"].get("register")
    rows = [
        Row(
            2,
            f"PostgreSQL: first registration of {large['size']:,}" + asked_at(large, BIG),
            secs(seconds),
            f"≤ {REGISTER_SECONDS:g} s",
            at_most(seconds, REGISTER_SECONDS),
        )
    ]
    before = small["first"].get("register")
    if small is not large and seconds and before:
        ratio = (seconds / large["size"]) / (before / small["size"])
        rows.append(
            Row(
                2,
                f"PostgreSQL: first registration linear, {small['size']:,} -> {large['size']:,}",
                f"{ratio:.2f}x the time per entry ({secs(before)} -> {secs(seconds)})",
                f"≤ {LINEAR_RATIO:g}x",
                ratio <= LINEAR_RATIO,
            )
        )
    return rows


def idle_targets(idle: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for store in sorted({r["store"] for r in idle}):
        runs = sorted((r for r in idle if r["store"] == store), key=lambda r: r["size"])
        if len(runs) < 2:
            continue
        small, large = runs[0], runs[-1]
        cpu, trips = small["cpu_percent"], small["round_trips_per_second"]
        if not (small.get("rss_mib") and large.get("rss_mib")):
            # READY carries the replica's RSS: without it the child never got ready, and
            # its CPU and round trips (none) say nothing.
            rows.append(
                Row(2, f"{store}: an idle replica at {large['size']:,} entries", "—", "", None)
            )
            continue
        met = large["cpu_percent"] <= max(cpu * IDLE_RATIO, cpu + IDLE_CPU_SLACK) and large[
            "round_trips_per_second"
        ] <= max(trips * IDLE_RATIO, trips + IDLE_TRIPS_SLACK)
        rows.append(
            Row(
                2,
                f"{store}: an idle replica at {large['size']:,} entries as at {small['size']:,}",
                f"CPU {cpu:.2f} -> {large['cpu_percent']:.2f} %, round trips "
                f"{trips:.2f} -> {large['round_trips_per_second']:.2f}/s",
                f"≤ {IDLE_RATIO:g}x, or + {IDLE_CPU_SLACK:g} % CPU, + {IDLE_TRIPS_SLACK:g}/s",
                met,
            )
        )
    return rows


# --- 3. cost independent of history -------------------------------------------------------


def history_targets(history: dict[str, Any]) -> list[Row]:
    after = {
        r["namespace"]: r
        for r in history.get("ticks_measured", [])
        if r["schema"].startswith("after")
    }
    rows: list[Row] = []
    empty, full = after.get("empty"), after.get("full")
    if empty and full:
        tick_e, tick_f = empty["tick_seconds"], full["tick_seconds"]
        rows += [
            Row(
                3,
                f"PostgreSQL: a tick with {history['rows']:,} dispatch rows as with none (median)",
                f"{tick_f * 1000:.2f} ms vs {tick_e * 1000:.2f} ms empty",
                f"≤ {TICK_RATIO:g}x, or + {TICK_SLACK * 1000:g} ms",
                tick_f <= max(tick_e * TICK_RATIO, tick_e + TICK_SLACK),
            ),
            Row(
                3,
                "PostgreSQL: statements per tick, full vs empty",
                f"{full['statements']:.0f} vs {empty['statements']:.0f}",
                "the same",
                full["statements"] <= empty["statements"],
            ),
            Row(
                3,
                "PostgreSQL: buffers `load_states` reads under the lock, full vs empty",
                f"{full['buffers']:,} vs {empty['buffers']:,}",
                f"≤ {BUFFERS_RATIO:g}x",
                full["buffers"] <= empty["buffers"] * BUFFERS_RATIO,
            ),
        ]
    else:
        rows.append(Row(3, "a tick with a long history as with none", "—", "", None))
    rows += prune_targets(history.get("prune"))
    return rows


def prune_targets(prune: dict[str, Any] | None) -> list[Row]:
    if not prune:
        return [Row(3, "prune keeps up with 1,000 windows a second", "—", "", None)]
    rate = prune["sustained_rows_per_second"]
    pass_rows = prune["budget_pass_rows"]
    # A pass that deleted the whole backlog ran out of rows, not of time: a lower bound.
    bound = "≥ " if prune["deleted"] == 0 else ""
    return [
        Row(
            3,
            f"PostgreSQL: prune on a backlog of {prune['rows']:,} rows, as beat paces it",
            f"{bound}{rate:,.0f} rows/s ({pass_rows:,} per pass of "
            f"{prune['budget_pass_seconds']:.1f} s, one every {prune['backlog_interval']:g} s)",
            f"≥ {PRUNE_RATE:,.0f} rows/s",
            rate >= PRUNE_RATE,
        ),
        Row(
            3,
            "PostgreSQL: prune deletes in bounded batches: the longest batch's transaction",
            f"{prune['longest_batch_seconds'] * 1000:,.0f} ms "
            f"(the rest: {prune['deleted']:,} rows in {secs(prune['seconds'])})",
            f"≤ {PRUNE_BATCH_SECONDS * 1000:,.0f} ms",
            prune["longest_batch_seconds"] <= PRUNE_BATCH_SECONDS,
        ),
    ]


# --- 4. a runtime change ---------------------------------------------------------------


def runtime_targets(runtime: dict[str, Any]) -> list[Row]:
    changes = runtime.get("changes", [])
    rows = []
    for store in dict.fromkeys(c["store"] for c in changes):
        mine = [c for c in changes if c["store"] == store]
        worst = max(max(c["registered"], c["loaded"]) for c in mine)
        # Adding or editing registers and plans that entry: none means it was never seen.
        seen = all(
            c["registered"] >= 1 and c["loaded"] >= 1 for c in mine if c["change"] != "remove"
        )
        made = "/".join(c["change"] for c in mine)
        size = runtime["entries"]
        what = f"{store}: one runtime entry {made} among {size:,}"
        if store == DCB_ROWS:
            what = f"DatabaseScheduler: one django-celery-beat row {made} among {size:,}"

        def each(key: str, mine: list[dict[str, Any]] = mine) -> str:
            return " / ".join(f"{c[key]:,}" for c in mine)

        rows.append(
            Row(
                4,
                what,
                f"registered {each('registered')}, planned {each('loaded')}; "
                + " / ".join(f"{c['seconds']:.3f}" for c in mine)
                + " s",
                "that one entry: 1 each (0 for a removal)",
                worst <= 1 and seen,
            )
        )
    if not rows:
        rows.append(Row(4, "one runtime entry changed among 100,000", "—", "", None))
    if DCB_ROWS not in {c["store"] for c in changes}:
        rows.append(Row(4, "one django-celery-beat row changed among 100,000", "—", "", None))
    return rows


# --- 5. django-celery-beat's rows ----------------------------------------------------------


def dcb_targets(scale: dict[str, Any]) -> list[Row]:
    runs = scale.get("dcb", [])
    if not runs:
        return [Row(5, "DatabaseScheduler over django-celery-beat's rows", "—", "", None)]
    size = max(r["size"] for r in runs)
    ours = next((r for r in runs if r["size"] == size and r["scheduler"] == DJANGO), None)
    theirs = next((r for r in runs if r["size"] == size and r["scheduler"] == DCB), None)
    figures: list[tuple[str, str, Callable[[float], str]]] = [
        ("startup", "start-up", secs),
        ("pickup", "an edit picked up", secs),
        ("rss_mib", "peak RSS", lambda v: f"{v:,.0f} MiB"),
    ]
    rows = []
    for key, what, shown in figures:
        mine = None if ours is None else ours.get(key)
        other = None if theirs is None else theirs.get(key)
        rows.append(
            Row(
                5,
                f"safebeat's DatabaseScheduler, {size:,} rows: {what}",
                "—" if mine is None else shown(mine),
                "≤ django-celery-beat's",
                None if mine is None or other is None else mine <= other,
                f"django-celery-beat {'—' if other is None else shown(other)}",
            )
        )
    return rows


# --- 6. replicas --------------------------------------------------------------------------


def replica_targets(scale: dict[str, Any], raw_cpu: float | None) -> list[Row]:
    runs = scale.get("replicas", [])
    rows = []
    for store in sorted({r["store"] for r in runs}):
        mine = sorted((r for r in runs if r["store"] == store), key=lambda r: r["replicas"])
        one: float | None = next((r["seconds"] for r in mine if r["replicas"] == 1), None)
        times = ", ".join(f"{r['replicas']}: {secs(r['seconds'])}" for r in mine)
        slowest = max(mine, key=lambda r: float("inf") if r["seconds"] is None else r["seconds"])
        met: Verdict = None  # without one replica's burst, or with it alone
        if one is not None and len(mine) > 1:
            met = slowest["seconds"] is not None and slowest["seconds"] <= one * REPLICA_SLACK
        if not all(complete(r) for r in mine):
            met = False  # a replica missing, windows sent twice or never, or late to start
        rows.append(
            Row(
                6,
                f"{store}: {mine[0]['size']:,} due at once, replicas "
                f"{', '.join(str(r['replicas']) for r in mine)}: never slower than one",
                times,
                f"each ≤ {REPLICA_SLACK:g}x one replica's",
                met,
            )
        )
        rows.append(cpu_row(store, mine, raw_cpu))
    return rows or [Row(6, "N replicas on one burst", "—", "", None)]


def complete(run: dict[str, Any]) -> bool:
    """Every replica reported, all were ready before the instant, and the windows they sent
    add up to the burst: a burst with windows lost or sent twice times something else."""
    sent = run.get("sent") or []
    return (
        len(sent) == run["replicas"]
        and sum(sent) == run["size"]
        and bool(run.get("ready_before_due"))
    )


def cpu_row(store: str, runs: list[dict[str, Any]], raw_cpu: float | None) -> Row:
    """The replica with the most CPU per 10,000 windows it sent (a replica that sent none
    is charged for a fair share of the burst). Its CPU runs until it has nothing due, not
    only until the burst is on the broker: windows other replicas claimed cost it too."""
    worst: tuple[float, int] | None = None
    for run in runs:
        share = run["size"] / run["replicas"]
        spent = run.get("cpu_until_idle") or run.get("cpu_seconds") or []
        for cpu, sent in zip(spent, run["sent"], strict=False):
            if cpu is not None:
                per = cpu * PER_WINDOWS / (sent or share)
                worst = max(worst or (per, run["replicas"]), (per, run["replicas"]))
    figure = "—"
    met: Verdict = None
    if worst is not None:
        figure = f"{worst[0]:.2f} s (worst replica, {worst[1]} running)"
        if raw_cpu:
            figure += f" = {worst[0] / raw_cpu:.2f}x"
            met = worst[0] / raw_cpu <= REPLICA_CPU_RATIO
    return Row(
        6,
        f"{store}: each replica's CPU per {PER_WINDOWS:,} windows",
        figure,
        f"≤ {REPLICA_CPU_RATIO:g}x raw kombu's ({secs(raw_cpu, 2)})",
        met,
    )


# --- the table ------------------------------------------------------------------------------


def judge(reports: dict[str, dict[str, Any]]) -> list[Row]:
    peers, scale = reports.get("peers", {}), reports.get("scale", {})
    return [
        *burst_targets(peers),
        *big_targets(scale),
        *history_targets(reports.get("history", {})),
        *runtime_targets(reports.get("runtime", {})),
        *dcb_targets(scale),
        *replica_targets(scale, raw_kombu(peers)[1]),
    ]


def verdict(met: Verdict) -> str:
    return met if isinstance(met, str) else VERDICTS[met]


def render(rows: list[Row]) -> str:
    """One Markdown table; the count of each verdict under it."""
    lines = [
        "| # | target | figure (this run) | limit | beside | |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.target} | {r.what} | {r.figure} | {r.limit} | {r.beside} | {verdict(r.verdict)} |"
        for r in rows
    ]
    tally = {"met": True, "missed": False, "not measured": None, "shown": "shown"}
    counts = [f"{sum(r.verdict == met for r in rows)} {name}" for name, met in tally.items()]
    return "\n".join(lines) + "\n\n" + ", ".join(counts)
