"""The first incident, rebuilt: APScheduler in a FastAPI service, three replicas, one report.

What it shows. A FastAPI service ran APScheduler inside the app; scaled to three pods,
the weekly report went out three times (37,200 mails instead of 12,400). This script
starts that service twice, side by side, three uvicorn processes each:

- stock: APScheduler's own thread-pool executor (`WITHOUT_SAFEBEAT=1`): every replica
  sends every report;
- safebeat: `safebeat.contrib.apscheduler.ThreadPoolExecutor`: each run time is claimed
  once in a shared SQLite store, and only the replica that claimed it sends.

The weekly schedule is replaced by one every `--every` seconds, so that a few "weeks"
pass in `--seconds`. Then it counts the mails each side's mail server received, for the
windows that came while all three replicas of both sides were up.

What it needs. This repository's virtualenv with the dev extra (`make` installs it):
safebeat with APScheduler 3, FastAPI and uvicorn. No server: the store and the mail
servers are SQLite files.

How to run it, from the repository root:

    .venv/bin/python examples/fastapi_apscheduler/run.py

It takes about 20 seconds. Logs and SQLite files go to `--workdir` (a new temporary
folder unless given), which it names at the end, beside `summary.json`. Exit status: 0
when safebeat's side sent one report (each recipient mailed once) per window, 1
otherwise or when something could not start, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import closing, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPLICAS = 3
START_TIMEOUT = 60.0


class ExampleError(Exception):
    """Something kept the example from running; the message says what and where to look."""


@dataclass
class Side:
    """One service (stock or safebeat): its replicas and its mail server."""

    name: str
    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)

    @property
    def outbox(self) -> Path:
        return self.folder / "outbox.sqlite3"

    def env(self, every: int, recipients: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAFEBEAT_")}
        env.update(
            SAFEBEAT_URL=f"sqlite:///{self.folder / 'safebeat.sqlite3'}",
            OUTBOX=str(self.outbox),
            REPORT_EVERY_SECONDS=str(every),
            RECIPIENTS=str(recipients),
        )
        if self.name == "stock":
            env["WITHOUT_SAFEBEAT"] = "1"
        return env

    def start(self, every: int, recipients: int) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(self.outbox)) as outbox:
            outbox.execute("PRAGMA journal_mode=WAL")  # three writers on one host
        for index in range(REPLICAS):
            port = _free_port()
            log = (self.folder / f"replica-{index}.log").open("wb")
            self.ports.append(port)
            command = [sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(HERE),
                       "--port", str(port), "--log-level", "warning"]  # fmt: skip
            self.processes.append(
                subprocess.Popen(
                    command, env=self.env(every, recipients), stdout=log, stderr=subprocess.STDOUT
                )
            )

    def wait_until_up(self, deadline: float) -> None:
        for index, port in enumerate(self.ports):
            while not _answers(port):
                if self.processes[index].poll() is not None or time.monotonic() > deadline:
                    log = self.folder / f"replica-{index}.log"
                    raise ExampleError(f"{self.name} replica {index} did not start; see {log}")
                time.sleep(0.1)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # uvicorn runs the lifespan's shutdown
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()

    def count(self, since: datetime, until: datetime) -> dict[str, int]:
        """Windows, reports and mails in (since, until], from the mail server's log."""
        with closing(sqlite3.connect(self.outbox, timeout=30)) as outbox:
            rows = outbox.execute(
                "SELECT window, sender, COUNT(*) FROM mail GROUP BY window, sender"
            ).fetchall()
        inside = [
            (window, sender, mails)
            for window, sender, mails in rows
            if since < datetime.fromisoformat(window) <= until
        ]
        windows = {window for window, _, _ in inside}
        return {
            "windows": len(windows),
            "reports": len(inside),
            "mails": sum(mails for _, _, mails in inside),
            "senders": len({sender for _, sender, _ in inside}),
        }


def _free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def run(seconds: float, every: int, recipients: int, workdir: Path) -> int:
    sides = [Side("stock", workdir / "stock"), Side("safebeat", workdir / "safebeat")]
    try:
        for side in sides:
            side.start(every, recipients)
        deadline = time.monotonic() + START_TIMEOUT
        for side in sides:
            side.wait_until_up(deadline)
        since = datetime.now(timezone.utc)
        print(f"6 replicas up; sending a report every {every}s for {seconds:g}s ...")
        time.sleep(seconds)
        until = datetime.now(timezone.utc) - timedelta(seconds=1)  # let the last one finish
        time.sleep(1)
    finally:
        for side in sides:
            side.stop()
    stock, safe = (side.count(since, until) for side in sides)
    print(_table(stock, safe, recipients))
    summary = {"recipients": recipients, "stock": stock, "safebeat": safe}
    (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nLogs, stores and mail servers: {workdir}")
    once = safe["windows"] > 0 and safe["reports"] == safe["windows"]
    return 0 if once and safe["mails"] == safe["windows"] * recipients else 1


def _table(stock: dict[str, int], safe: dict[str, int], recipients: int) -> str:
    lines = [
        f"{'':40}{'stock APScheduler x3':>22}{'safebeat executor x3':>22}",
        "-" * 84,
    ]
    rows = [
        ("report windows", "windows"),
        ("reports sent", "reports"),
        ("mails sent", "mails"),
        ("replicas that sent a report", "senders"),
    ]
    for label, key in rows:
        lines.append(f"{label:40}{stock[key]:>22,}{safe[key]:>22,}")
    lines.append("")
    for side, counts in (("stock", stock), ("safebeat", safe)):
        extra = counts["reports"] - counts["windows"]
        lines.append(
            f"{side}: {counts['reports']} report(s) for {counts['windows']} window(s) "
            f"({extra} duplicate(s), {extra * recipients:,} extra mails)"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="how long to run")
    parser.add_argument("--every", type=int, default=2, help="seconds between reports")
    parser.add_argument("--recipients", type=int, default=12_400, help="mails per report")
    parser.add_argument("--workdir", type=Path, help="where logs and SQLite files go")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="safebeat-fastapi-"))
    try:
        return run(args.seconds, args.every, args.recipients, workdir)
    except ExampleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    with suppress(BrokenPipeError):
        sys.exit(main())
