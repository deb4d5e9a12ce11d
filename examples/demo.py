"""safebeat demo: three beats, each scheduled window sent once; stock beat sends it three times.

What it shows. Teams run `celery beat` in every replica of their app, and every periodic
task then runs once per replica. This script starts, side by side and for the same time:

- three stock `celery beat` processes (the default PersistentScheduler, each with its own
  schedule file, as replicas run it), publishing to one broker folder, and
- three `celery beat -S safebeat.Scheduler` processes sharing one SQLite store,
  publishing to another broker folder,

all loading the same four entries (`examples/demo_app.py`: every 2 s, every 5 s, every
10 s and a crontab every minute). After `--seconds` (default 30) it stops them with
SIGTERM, reads every message they published and prints, per entry, how many runs or
windows fell in that time, how many messages each kind of beat sent and how many of them
were duplicates, and which safebeat replicas did the sending. Expect about 3x for stock
beat and exactly 1x for safebeat.

What it needs. Nothing but this repository's virtualenv (safebeat, celery, kombu): no
Redis, RabbitMQ or PostgreSQL. The broker is kombu's `filesystem://` transport, which
writes one file per message, and safebeat's store is an SQLite file. No worker runs; the
beats only publish.

How to run it, from the repository root:

    make demo
    .venv/bin/python examples/demo.py --seconds 20

Everything happens in `.demo/` at the repository root, which is emptied when a run
starts and kept afterwards: each beat's log, the message files and the SQLite store.
Exit status: 0 when safebeat sent every window once, 1 when it sent a window more than
once (or a beat could not start, or safebeat sent nothing though windows came), 130 when
interrupted (Ctrl-C stops every beat it started).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from safebeat.errors import SafebeatError
from safebeat.identity import parse_window
from safebeat.records import Status
from safebeat.stores.sqlite import SqliteStore

EXAMPLES = Path(__file__).resolve().parent
ROOT = EXAMPLES.parent
WORK = ROOT / ".demo"
APP = "demo_app"
#: safebeat's namespace is the Celery app's main name unless configured otherwise.
NAMESPACE = "demo"
REPLICAS = 3
READY_LINE = "beat: Starting..."
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
PROGRESS_EVERY = 5.0
#: A window this close to the stop may still have been due when SIGTERM came; if it was
#: not sent, it does not count as missed.
STOP_MARGIN_US = 1_000_000
US = 1_000_000
MINUTE_US = 60 * US


class DemoError(Exception):
    """Something kept the demo from running; the message says what and where to look."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM to the demo itself."""


@dataclass(frozen=True)
class DemoEntry:
    """One entry of `demo_app.ENTRIES`: an interval of `period_us`, or crontab every minute."""

    name: str
    task: str
    period_us: int
    crontab: bool

    @property
    def schedule(self) -> str:
        return "every minute (crontab)" if self.crontab else f"every {self.period_us // US} s"


@dataclass
class Beat:
    """One `celery beat` child process."""

    kind: str  # "stock" or "safebeat"
    number: int
    process: subprocess.Popen[bytes]
    log: Path
    ready_at: float | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} replica {self.number} (pid {self.process.pid})"


@dataclass
class Row:
    """One line of the result table."""

    entry: DemoEntry
    stock_runs: int = 0
    stock_sent: int = 0
    windows: int = 0
    safebeat_sent: int = 0
    twice: dict[int, int] = field(default_factory=dict)  # window -> messages, when > 1
    missed: list[int] = field(default_factory=list)
    senders: set[str] = field(default_factory=set)

    @property
    def stock_duplicates(self) -> int:
        return max(0, self.stock_sent - self.stock_runs)


# --- running the beats -----------------------------------------------------------------------


def load_entries() -> list[DemoEntry]:
    """Read the entries from the demo app, the same module the beats load."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    demo_app = importlib.import_module(APP)
    return [
        DemoEntry(name, task, (seconds or 60) * US, seconds is None)
        for name, (task, seconds) in demo_app.ENTRIES.items()
    ]


def prepare(work: Path) -> dict[str, Path]:
    """Make a fresh work folder with one subfolder (and broker folder) per kind of beat."""
    if work.exists():
        shutil.rmtree(work)
    folders = {"stock": work / "stock", "safebeat": work / "safebeat"}
    for folder in folders.values():
        (folder / "broker").mkdir(parents=True)
    return folders


def child_env(folder: Path, kind: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAFEBEAT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env["DEMO_BROKER_FOLDER"] = str(folder / "broker")
    if kind == "safebeat":
        env["SAFEBEAT_URL"] = f"sqlite:///{folder / 'safebeat.sqlite3'}"
    return env


def spawn(kind: str, number: int, folder: Path) -> Beat:
    command = [sys.executable, "-m", "celery", "-A", APP, "beat", "--loglevel", "INFO"]
    if kind == "safebeat":
        command += ["--scheduler", "safebeat.Scheduler"]
    else:
        command += ["--schedule", str(folder / f"replica-{number}.schedule")]
    log = folder / f"replica-{number}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=folder,
            env=child_env(folder, kind),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Beat(kind, number, process, log)


def tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "    (no log)"
    return "\n".join(f"    {line}" for line in text.splitlines()[-lines:])


def wait_ready(beats: Sequence[Beat]) -> None:
    """Wait until every beat has logged that it started; fail if one exits first."""
    deadline = time.monotonic() + START_TIMEOUT
    while any(beat.ready_at is None for beat in beats):
        for beat in beats:
            if beat.ready_at is not None:
                continue
            if READY_LINE in beat.log.read_text(errors="replace"):
                beat.ready_at = time.time()
            elif beat.process.poll() is not None:
                raise DemoError(
                    f"{beat.label} exited with status {beat.process.returncode} before "
                    f"starting. Last lines of {beat.log}:\n{tail(beat.log)}"
                )
        if time.monotonic() > deadline:
            late = ", ".join(beat.label for beat in beats if beat.ready_at is None)
            raise DemoError(f"{late} did not start within {START_TIMEOUT:.0f} s; see {WORK}")
        time.sleep(0.05)


def count_messages(folder: Path) -> int:
    return sum(1 for _ in (folder / "broker").glob("*.msg"))


def run_for(seconds: float, beats: Sequence[Beat], folders: dict[str, Path]) -> None:
    """Let the beats run, printing progress; stop early if one of them dies."""
    started = time.monotonic()
    next_report = started + PROGRESS_EVERY
    end = started + seconds
    while (now := time.monotonic()) < end:
        for beat in beats:
            if beat.process.poll() is not None:
                raise DemoError(
                    f"{beat.label} exited with status {beat.process.returncode} while "
                    f"running. Last lines of {beat.log}:\n{tail(beat.log)}"
                )
        if now >= next_report:
            print(
                f"  {now - started:4.0f} s / {seconds:.0f} s   "
                f"stock beat sent {count_messages(folders['stock']):3d} messages, "
                f"safebeat {count_messages(folders['safebeat']):3d}",
                flush=True,
            )
            next_report += PROGRESS_EVERY
        time.sleep(min(0.2, max(0.0, end - now)))


def stop(beats: Sequence[Beat]) -> None:
    """SIGTERM every beat still running, then SIGKILL what has not exited in time."""
    for beat in beats:
        if beat.process.poll() is None:
            beat.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for beat in beats:
        try:
            beat.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"  {beat.label} ignored SIGTERM for {STOP_TIMEOUT:.0f} s; killing it")
            beat.process.kill()
            beat.process.wait()


def _interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


# --- reading what they sent ------------------------------------------------------------------


def read_messages(folder: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Return the headers of every message file in the folder, and notes on unreadable ones."""
    headers: list[dict[str, Any]] = []
    notes: list[str] = []
    for path in sorted((folder / "broker").glob("*.msg")):
        try:
            headers.append(json.loads(path.read_bytes())["headers"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"cannot read message {path.name}: {exc}")
    return headers, notes


def instant_us(instant: datetime) -> int:
    return int(instant.timestamp()) * US + instant.microsecond


def window_us(text: str) -> int:
    return instant_us(parse_window(text))


def format_us(micros: int) -> str:
    instant = datetime.fromtimestamp(micros / US, timezone.utc)
    return instant.isoformat(timespec="seconds").replace("+00:00", "Z")


def slots(period_us: int, anchor_us: int, after_us: int, until_us: int) -> list[int]:
    """The instants anchor + k * period in (after, until]."""
    first = (after_us - anchor_us) // period_us + 1
    last = (until_us - anchor_us) // period_us
    return [anchor_us + k * period_us for k in range(first, last + 1)]


def stock_runs(entry: DemoEntry, started: float, stopped: float) -> int:
    """How often one stock beat that started at `started` runs the entry until `stopped`.

    Stock beat runs an interval entry `every` seconds after its own start (its last run
    is "now" when it starts), and a crontab entry at each matching minute.
    """
    start_us, stop_us = int(started * US), int(stopped * US)
    if entry.crontab:
        return len(slots(MINUTE_US, 0, start_us, stop_us))
    return max(0, (stop_us - start_us) // entry.period_us)


def read_store(path: Path) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, int], str]]:
    """Return each entry's (anchor, defined_at) and who claimed each (entry, window)."""
    store = SqliteStore(f"sqlite:///{path.resolve()}")
    try:
        entries = {
            name: (instant_us(state.anchor), instant_us(state.defined_at))
            for name, state in store.states(NAMESPACE).items()
        }
        claimed_by = {
            (row.entry, instant_us(row.window)): f"{row.host}:{row.pid}"
            for row in store.history(NAMESPACE, limit=1_000_000)
            if row.status in (Status.CLAIMED, Status.SENT)
        }
    finally:
        store.close()
    return entries, claimed_by


def origin_of(headers: dict[str, Any]) -> str:
    """`gen1234@host` (Celery's origin header) -> `host:1234`."""
    origin = str(headers.get("origin") or "?")
    pid, _, host = origin.partition("@")
    return f"{host}:{pid.removeprefix('gen')}"


def tally_stock(
    rows: dict[str, Row], beats: Sequence[Beat], stopped: float, folder: Path
) -> tuple[Counter[str], list[str]]:
    by_task = {row.entry.task: row for row in rows.values()}
    messages, notes = read_messages(folder)
    per_replica: Counter[str] = Counter()
    for headers in messages:
        row = by_task.get(str(headers.get("task")))
        if row is None:
            notes.append(f"stock beat sent an unexpected task {headers.get('task')!r}")
            continue
        row.stock_sent += 1
        per_replica[origin_of(headers)] += 1
    for row in rows.values():
        row.stock_runs = max(
            stock_runs(row.entry, beat.ready_at or stopped, stopped) for beat in beats
        )
    return per_replica, notes


def tally_safebeat(
    rows: dict[str, Row], stopped: float, folder: Path
) -> tuple[Counter[str], list[str]]:
    messages, notes = read_messages(folder)
    sent: dict[str, Counter[int]] = defaultdict(Counter)
    origins: dict[tuple[str, int], str] = {}
    for headers in messages:
        name, window = headers.get("safebeat_entry"), headers.get("safebeat_window")
        if name not in rows or not isinstance(window, str):
            notes.append(f"safebeat sent a message without known entry/window: {headers}")
            continue
        sent[name][window_us(window)] += 1
        origins.setdefault((name, window_us(window)), origin_of(headers))
    try:
        states, claimed_by = read_store(folder / "safebeat.sqlite3")
    except SafebeatError as exc:
        notes.append(f"cannot read safebeat's store ({exc}); windows counted from messages")
        states, claimed_by = {}, {}
    per_replica: Counter[str] = Counter()
    stop_us = int(stopped * US)
    for name, row in rows.items():
        windows = sent[name]
        expected: list[int] = []
        if name in states:
            anchor, defined_at = states[name]
            if row.entry.crontab:
                anchor = 0  # every minute, on the minute (UTC)
            expected = slots(row.entry.period_us, anchor, defined_at, stop_us - STOP_MARGIN_US)
        row.windows = len(set(expected) | set(windows))
        row.safebeat_sent = sum(windows.values())
        row.twice = {window: count for window, count in windows.items() if count > 1}
        row.missed = [window for window in expected if window not in windows]
        for window in windows:
            sender = claimed_by.get((name, window)) or origins[(name, window)]
            row.senders.add(sender)
            per_replica[sender] += 1
    return per_replica, notes


def log_problems(beats: Iterable[Beat], limit: int = 10) -> list[str]:
    """Warning and error lines (and tracebacks) in the safebeat replicas' logs."""
    found: list[str] = []
    for beat in beats:
        text = beat.log.read_text(errors="replace") if beat.log.exists() else ""
        for line in text.splitlines():
            if any(word in line for word in ("WARNING", "ERROR", "CRITICAL", "Traceback")):
                found.append(f"replica {beat.number}: {line.strip()}")
    if len(found) > limit:
        found = [*found[:limit], f"... and {len(found) - limit} more (see {WORK})"]
    return found


# --- the report ------------------------------------------------------------------------------


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def table(rows: Sequence[Row]) -> list[str]:
    head = ["entry", "schedule", "runs", "sent", "duplicates"]
    head += ["windows", "sent", "duplicates", "sent by"]
    body = [
        [
            row.entry.name,
            row.entry.schedule,
            str(row.stock_runs),
            str(row.stock_sent),
            str(row.stock_duplicates),
            str(row.windows),
            str(row.safebeat_sent),
            str(len(row.twice)),
            plural(len(row.senders), "replica") if row.senders else "-",
        ]
        for row in rows
    ]
    total = ["total", ""]
    total += [str(sum(row.stock_runs for row in rows)), str(sum(row.stock_sent for row in rows))]
    total += [str(sum(row.stock_duplicates for row in rows))]
    total += [str(sum(row.windows for row in rows)), str(sum(row.safebeat_sent for row in rows))]
    total += [str(sum(len(row.twice) for row in rows)), ""]
    widths = [max(len(cells[i]) for cells in [head, *body, total]) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        left = f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}"
        stock = "  ".join(f"{cells[i]:>{widths[i]}}" for i in range(2, 5))
        safe = "  ".join(f"{cells[i]:>{widths[i]}}" for i in range(5, 8))
        return f"{left} | {stock} | {safe}  {cells[8]:<{widths[8]}}".rstrip()

    sample = line(head)
    first_bar = sample.index("|")
    second_bar = sample.index("|", first_bar + 1)
    stock_title = f"stock celery beat x{REPLICAS}"
    groups = f"{'':<{first_bar}}| {stock_title:<{second_bar - first_bar - 2}}| safebeat x{REPLICAS}"
    rule = "-" * len(sample)
    return [groups, sample, rule, *(line(cells) for cells in body), rule, line(total)]


def ratio(sent: int, of: int) -> str:
    return f"{sent / of:.1f}x" if of else "-"


def report(
    rows: Sequence[Row],
    seconds: float,
    stock_by: Counter[str],
    safebeat_by: Counter[str],
    names: dict[str, str],
) -> None:
    print()
    for text in table(rows):
        print(text)
    print()
    print("runs:       how often one stock beat runs the entry in the time it ran")
    print("windows:    scheduled instants in the run (from safebeat's store and messages)")
    print("duplicates: stock: messages beyond one per run; safebeat: windows sent twice or more")
    print("sent by:    safebeat replicas that sent the entry's windows: whichever replica takes")
    print("            the tick first sends, so this column changes from run to run")
    if any(row.entry.crontab for row in rows):
        print("crontab:    on the minute: 1 when a minute turned after that side's beats started")
    print()

    def by_replica(counts: Counter[str]) -> str:
        return ", ".join(f"{names.get(who, who)}: {n}" for who, n in sorted(counts.items()))

    print(f"stock beat messages per replica:    {by_replica(stock_by) or 'none'}")
    print(f"safebeat windows sent per replica:  {by_replica(safebeat_by) or 'none'}")
    runs = sum(row.stock_runs for row in rows)
    stock_sent = sum(row.stock_sent for row in rows)
    windows = sum(row.windows for row in rows)
    safe_sent = sum(row.safebeat_sent for row in rows)
    twice = sum(len(row.twice) for row in rows)
    print()
    print(
        f"Summary: in {seconds:.0f} s, {REPLICAS} stock beats sent {plural(stock_sent, 'message')} "
        f"for {plural(runs, 'run')} ({ratio(stock_sent, runs)}, "
        f"{plural(sum(row.stock_duplicates for row in rows), 'duplicate')}); "
        f"{REPLICAS} safebeat beats sent {safe_sent} for {plural(windows, 'window')} "
        f"({ratio(safe_sent, windows)}, {plural(twice, 'duplicate')})."
    )


def verdict(rows: Sequence[Row], notes: Sequence[str], problems: Sequence[str]) -> int:
    status = 0
    for row in rows:
        for window, count in sorted(row.twice.items()):
            print(f"FAIL: safebeat sent {row.entry.name} window {format_us(window)} {count} times")
            status = 1
        if row.missed:
            missed = ", ".join(format_us(window) for window in row.missed)
            print(f"note: safebeat sent no message for {row.entry.name} window(s) {missed}")
    if not sum(row.safebeat_sent for row in rows) and any(row.missed for row in rows):
        print(f"FAIL: safebeat sent no message at all; see the logs in {WORK / 'safebeat'}")
        status = 1
    for note in notes:
        print(f"note: {note}")
    if problems:
        print("safebeat logged warnings or errors:")
        for line in problems:
            print(f"  {line}")
    if status == 0:
        print("OK: safebeat sent every window once.")
    print(f"Logs, message files and the SQLite store: {WORK}")
    return status


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run 3 stock celery beats beside 3 safebeat beats and count what they send."
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="how long the beats run (default: 30)",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be greater than zero")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    entries = load_entries()
    print(
        f"safebeat demo: {REPLICAS} stock `celery beat` and {REPLICAS} "
        f"`celery beat -S safebeat.Scheduler` for {args.seconds:.0f} s "
        "(filesystem broker, SQLite store: no server)"
    )
    print(f"work folder: {WORK}")
    folders = prepare(WORK)
    signal.signal(signal.SIGTERM, _interrupted)
    beats: list[Beat] = []
    try:
        for number in range(1, REPLICAS + 1):
            for kind in ("stock", "safebeat"):
                beats.append(spawn(kind, number, folders[kind]))
        print(f"starting {len(beats)} beats...", flush=True)
        wait_ready(beats)
        print("all beats started; running", flush=True)
        run_for(args.seconds, beats, folders)
        stopped = time.time()
        print("stopping the beats (SIGTERM)...", flush=True)
        stop(beats)
    except (KeyboardInterrupt, Interrupted):
        print("\ninterrupted; stopping the beats", file=sys.stderr)
        stop(beats)
        return 130
    except DemoError as exc:
        stop(beats)
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    rows = {entry.name: Row(entry) for entry in entries}
    stock = [beat for beat in beats if beat.kind == "stock"]
    safebeat = [beat for beat in beats if beat.kind == "safebeat"]
    stock_by, stock_notes = tally_stock(rows, stock, stopped, folders["stock"])
    safebeat_by, safebeat_notes = tally_safebeat(rows, stopped, folders["safebeat"])
    names = {}
    for beat in beats:
        for who in (*stock_by, *safebeat_by):
            if who.endswith(f":{beat.process.pid}"):
                names[who] = f"replica {beat.number} (pid {beat.process.pid})"
    report(list(rows.values()), args.seconds, stock_by, safebeat_by, names)
    print()
    return verdict(list(rows.values()), [*stock_notes, *safebeat_notes], log_problems(safebeat))


if __name__ == "__main__":
    sys.exit(main())
