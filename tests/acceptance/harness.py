"""Run real `celery beat` processes and count what they put on a real broker."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from kombu import Connection, Queue

from safebeat.errors import SafebeatError
from safebeat.identity import parse_window
from safebeat.stores.protocols import Status, Store

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Message:
    entry: str
    window: datetime
    task_id: str


@dataclass
class Cluster:
    """Beat processes sharing one broker queue (and, for safebeat, one store)."""

    workdir: Path
    broker_url: str
    queue: str
    schedule: Mapping[str, float]
    env: Mapping[str, str] = field(default_factory=dict)
    app: str = "tests.acceptance.beatapp"
    #: The interpreter the processes run on, and their PYTHONPATH (where `app` is found):
    #: another virtualenv's python runs the safebeat installed there, not this checkout.
    python: str = sys.executable
    pythonpath: str = str(ROOT)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logfiles: list[Path] = field(default_factory=list)
    ready_lines: list[str] = field(default_factory=list)

    def start(self, count: int, *, scheduler: str | None = "safebeat.Scheduler") -> None:
        """Start `celery beat` processes (stock beat when `scheduler` is None)."""
        for _ in range(count):
            index = len(self.processes)
            options = ["beat", "-s", str(self.workdir / f"stock-schedule-{index}")]
            if scheduler:
                options += ["-S", scheduler]
            self._spawn(options, self.workdir / f"beat-{index}.log", "beat: Starting")

    def start_worker_beat(self, count: int) -> None:
        """Start `celery worker -B` processes that consume another queue (beat embedded)."""
        for _ in range(count):
            index = len(self.processes)
            options = [
                "worker",
                "-B",
                # `worker -S` is --statedb; the beat scheduler option is --scheduler.
                "--scheduler",
                "safebeat.Scheduler",
                "-Q",
                f"{self.queue}-unused",
                "--pool",
                "solo",
                "-n",
                f"worker{index}@%h",
                "-s",
                str(self.workdir / f"stock-{index}"),
            ]
            self._spawn(options, self.workdir / f"worker-{index}.log", "beat: Starting")

    def start_workers(self, count: int, *, pool: str = "solo", concurrency: int = 1) -> None:
        """Start `celery worker` processes consuming the queue (with `app`'s tasks)."""
        for _ in range(count):
            index = len(self.processes)
            options = ["worker", "--pool", pool, "--concurrency", str(concurrency)]
            options += ["-Q", self.queue, "-n", f"worker{index}@%h", "--without-gossip"]
            options += ["--without-mingle", "--without-heartbeat"]
            self._spawn(options, self.workdir / f"worker-{index}.log", " ready.")

    def _spawn(self, options: list[str], log: Path, ready: str) -> None:
        command = [self.python, "-m", "celery", "-A", self.app, *options]
        environment = {
            **os.environ,
            "PYTHONPATH": self.pythonpath,
            "SB_BROKER_URL": self.broker_url,
            "SB_QUEUE": self.queue,
            "SB_SCHEDULE": json.dumps(dict(self.schedule)),
            **self.env,
        }
        self.processes.append(
            subprocess.Popen(
                [*command, "-l", "INFO", "--logfile", str(log)],
                cwd=self.workdir,
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        )
        self.logfiles.append(log)
        self.ready_lines.append(ready)

    def wait_started(self, timeout: float = 60) -> None:
        """Wait until every process has logged that it started (beat) or is ready (worker)."""
        deadline = time.monotonic() + timeout
        for index, (log, ready) in enumerate(zip(self.logfiles, self.ready_lines, strict=True)):
            while not (log.exists() and ready in log.read_text()):
                assert self.processes[index].poll() is None, self.logs()
                assert time.monotonic() < deadline, f"{log.name} did not start:\n" + self.logs()
                time.sleep(0.1)

    def signal(self, index: int, signum: int) -> None:
        self.processes[index].send_signal(signum)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)

    def logs(self, lines: int = 40) -> str:
        parts = []
        for path in sorted(self.workdir.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)


def safebeat_cluster(
    workdir: Path,
    *,
    broker_url: str,
    queue: str,
    schedule: Mapping[str, float],
    store_url: str,
    namespace: str,
    claim_timeout: float,
    lock_timeout: float = 1.0,
) -> Cluster:
    """Beats on `store_url` in `namespace`, with the short timeouts the tests run on."""
    return Cluster(
        workdir=workdir,
        broker_url=broker_url,
        queue=queue,
        schedule=schedule,
        env={
            "SAFEBEAT_URL": store_url,
            "SAFEBEAT_NAMESPACE": namespace,
            "SAFEBEAT_CLAIM_TIMEOUT": f"{claim_timeout:g}",
            "SAFEBEAT_LOCK_TIMEOUT": f"{lock_timeout:g}",
        },
    )


def wait_registered(
    store: Store, namespace: str, names: Iterable[str], timeout: float = 60
) -> None:
    """Wait until beats registered every entry of `names` (the schema may not exist yet:
    the beats create it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if set(names) <= store.states(namespace).keys():
                return
        except SafebeatError:
            pass  # no replica has created the tables yet
        assert time.monotonic() < deadline, f"entries not registered in {timeout} s"
        time.sleep(0.2)


def redis_messages(broker_url: str, queue: str) -> list[dict[str, Any]]:
    """Every message on a Redis broker queue (left in place), as its headers."""
    client = redis.Redis.from_url(broker_url)
    return [json.loads(raw)["headers"] for raw in client.lrange(queue, 0, -1)]


def amqp_messages(broker_url: str, queue: str) -> list[dict[str, Any]]:
    """Every message on an AMQP queue (consumed), as its headers."""
    headers = []
    with Connection(broker_url) as conn:
        simple = conn.SimpleQueue(Queue(queue, routing_key=queue))
        while True:
            try:
                message = simple.get(block=True, timeout=1)
            except simple.Empty:
                break
            headers.append(dict(message.headers))
            message.ack()
        simple.close()
    return headers


def safebeat_messages(headers: Iterable[Mapping[str, Any]]) -> list[Message]:
    return [
        Message(h["safebeat_entry"], parse_window(h["safebeat_window"]), h["id"]) for h in headers
    ]


@dataclass
class Verdict:
    expected: int
    duplicates: dict[tuple[str, datetime], int]
    missing: list[tuple[str, datetime]]
    off_grid: list[tuple[str, datetime]]
    republished: int
    senders: Counter[str]

    def assert_exactly_once(self, logs: str) -> None:
        assert self.expected > 0, "no window was due during the run"
        assert self.duplicates == {}, f"windows claimed twice: {self.duplicates}\n{logs}"
        assert self.missing == [], f"windows never sent: {self.missing}\n{logs}"
        assert self.off_grid == [], f"messages for windows that do not exist: {self.off_grid}"


def verify(
    store: Store,
    namespace: str,
    schedule: Mapping[str, float],
    messages: list[Message],
    complete_until: datetime,
) -> Verdict:
    """Compare the broker's messages with the windows each entry had in the run.

    A window may appear twice on the broker only as a re-publish of the same claim (same
    task id, recorded with attempts > 1): exactly one claim, at-least-once publish.
    """
    states = store.states(namespace)
    rows = {(r.entry, r.window): r for r in store.history(namespace, limit=100_000)}
    by_window: dict[tuple[str, datetime], list[Message]] = defaultdict(list)
    for message in messages:
        by_window[(message.entry, message.window)].append(message)
    duplicates, missing, off_grid = {}, [], []
    expected = 0
    for name, seconds in schedule.items():
        state = states[name]
        every = timedelta(seconds=seconds)
        window = state.anchor + ((state.defined_at - state.anchor) // every + 1) * every
        while window <= complete_until:
            expected += 1
            if (name, window) not in by_window:
                missing.append((name, window))
            window += every
    for key, copies in by_window.items():
        name, window = key
        state = states.get(name)
        every = timedelta(seconds=schedule[name])
        if state is None or window <= state.defined_at or (window - state.anchor) % every:
            off_grid.append(key)
        task_ids = {m.task_id for m in copies}
        row = rows.get(key)
        republished = row is not None and row.attempts > 1
        if len(task_ids) > 1 or (len(copies) > 1 and not republished):
            duplicates[key] = len(copies)
    senders = Counter(r.host + ":" + str(r.pid) for r in rows.values() if r.status is Status.SENT)
    return Verdict(
        expected=expected,
        duplicates=duplicates,
        missing=missing,
        off_grid=off_grid,
        republished=sum(1 for r in rows.values() if r.attempts > 1),
        senders=senders,
    )


def children_of(pid: int) -> list[int]:
    """Every descendant of `pid`, read from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process under it: the whole tree, read before any dies (a
    prefork pool's children outlive a killed parent and would finish the run)."""
    for victim in [*children_of(pid), pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
