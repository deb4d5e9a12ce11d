"""Running one chaos scenario: real beat replicas per store (and stock beats), faults, a count.

A scenario run starts, side by side, N `celery beat -S safebeat.Scheduler` replicas on each
store it covers (PostgreSQL, Redis, SQLite) and, for the comparison, N stock `celery beat`
processes on the same schedule, all publishing to one Redis broker the run owns (each side
to its own queue). A collector thread takes every message off the broker as it arrives and
stamps it. The scenario's faults hit every side at the same moments; then the run
recovers, stops every process, and `tests.chaos.counting` counts each side's windows.

Each replica is a `tests.acceptance.harness.Cluster` of one process in a folder of its
own, so that one replica can get its own environment (a skewed clock, a proxied store URL,
a changed schedule) and be killed, frozen or replaced alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import redis

from safebeat.stores import open_store
from safebeat.stores.sqlite import SqliteStore
from tests.acceptance.harness import Cluster
from tests.chaos import counting
from tests.chaos.counting import Arrival, Tally
from tests.chaos.crontabs import crontab_entries, policy_group, slots_of
from tests.chaos.lab import OwnedPostgres, OwnedRedis
from tests.proxy import Proxy

#: What a side is: a store safebeat runs on, or stock beat.
POSTGRES, REDIS, SQLITE, STOCK = "PostgreSQL", "Redis", "SQLite", "stock beat"
LOG_SIGNS = {
    "store_unreachable": "store unreachable",
    "broker_unreachable": "broker unreachable",
    "republished": "re-publishing",
    "too_old_to_publish": "too old to publish safely",
    "definition_changed": "differs from the one registered before",
    "skipped_windows": "skipped windows of",
}
#: The PostgreSQL server's own log: a frozen lock holder's session ended by the server.
SERVER_LOG_SIGNS = {
    "server_ended_idle_transaction": "idle-in-transaction timeout",
    "server_lock_timeouts": "canceling statement due to lock timeout",
}


@dataclass(frozen=True)
class Mode:
    """How big and how long: `short` runs in CI, `default` and `long` make the published table."""

    name: str
    replicas: int
    entries: int
    baseline_replicas: int
    baseline_entries: int
    scale: float  # multiplies the length of every fault phase
    store_outage: float
    broker_outage: float
    stock_everywhere: bool  # stock beat beside every scenario, or only beside the baseline
    #: The long-outage scenario's minutely crontab entries, and how long its outage is.
    outage_entries: int = 2000
    outage_hours: float = 12.0
    claim_timeout: float = 2.0
    lock_timeout: float = 1.0

    @property
    def settle(self) -> float:
        """Windows this close to the end may still wait for a re-publish: not counted."""
        return 1.5 * self.claim_timeout + 2.5


MODES = {
    "short": Mode("short", 3, 6, 4, 20, 1.0, 3.0, 6.0, stock_everywhere=False),
    "default": Mode(
        "default", 5, 8, 10, 60, 3.0, 10.0, 30.0, stock_everywhere=True, outage_entries=5000
    ),
    "long": Mode(
        "long", 10, 10, 10, 60, 8.0, 20.0, 30.0, stock_everywhere=True, outage_entries=5000
    ),
}


def schedule_of(count: int) -> dict[str, dict[str, Any]]:
    """`count` entries every 1, 1.5 or 2 s; every fourth one with `misfire="all"`."""
    schedule: dict[str, dict[str, Any]] = {}
    for index in range(count):
        every = (1.0, 1.5, 2.0)[index % 3]
        spec: dict[str, Any] = {"every": every, "args": ["v1"]}
        name = f"e{index:02d}-every-{every:g}s"
        if index % 4 == 3:
            spec["misfire"] = "all"
            name += "-all"
        schedule[name] = spec
    return schedule


@dataclass
class Side:
    """The replicas of one store (or the stock beats) in a run, slot by slot."""

    kind: str
    folder: Path
    broker_url: str
    queue: str
    schedule: dict[str, dict[str, Any]]
    mode: Mode
    store_url: str | None = None
    namespace: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:8]}")
    slots: list[list[Cluster]] = field(default_factory=list)
    slot_env: dict[int, dict[str, str]] = field(default_factory=dict)
    proxy: Proxy | None = None
    #: How many of the lab's crontab entries (`tests.chaos.crontabs`) every replica adds.
    crontabs: int = 0

    @property
    def is_stock(self) -> bool:
        return self.kind == STOCK

    def _env(self, slot: int) -> dict[str, str]:
        env = {"SB_STOCK": "1"} if self.is_stock else {}
        if self.crontabs:
            env["SB_CRONTABS"] = str(self.crontabs)
        if not self.is_stock:
            assert self.store_url is not None
            env |= {
                "SAFEBEAT_URL": self.store_url,
                "SAFEBEAT_NAMESPACE": self.namespace,
                "SAFEBEAT_CLAIM_TIMEOUT": str(self.mode.claim_timeout),
                "SAFEBEAT_LOCK_TIMEOUT": str(self.mode.lock_timeout),
            }
        return env | self.slot_env.get(slot, {})

    def start(self, slot: int, schedule: Mapping[str, Any] | None = None) -> Cluster:
        """Start a replica in `slot` (a new generation of it if the slot ran before)."""
        while len(self.slots) <= slot:
            self.slots.append([])
        generation = len(self.slots[slot])
        workdir = self.folder / f"replica-{slot}-{generation}"
        workdir.mkdir(parents=True)
        replica = Cluster(
            workdir=workdir,
            broker_url=self.broker_url,
            queue=self.queue,
            # The chaos app reads richer JSON than the acceptance app's entry -> seconds.
            schedule=dict(schedule or self.schedule),  # type: ignore[arg-type]
            env=self._env(slot),
            app="tests.chaos.beatapp",
        )
        replica.start(1, scheduler=None if self.is_stock else "safebeat.Scheduler")
        self.slots[slot].append(replica)
        return replica

    def current(self, slot: int) -> Cluster:
        return self.slots[slot][-1]

    def signal(self, slot: int, signum: int) -> None:
        self.current(slot).signal(0, signum)

    def everyone(self) -> Iterator[Cluster]:
        for generations in self.slots:
            yield from generations

    def stop(self) -> None:
        """SIGCONT and SIGTERM every process first, then wait for each (SIGKILL if stuck)."""
        for replica in self.everyone():
            for process in replica.processes:
                if process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.send_signal(signal.SIGCONT)
                        process.terminate()
        for replica in self.everyone():
            replica.stop()

    def exited(self) -> list[int]:
        """Slots whose current replica is no longer running (nobody stopped it on purpose)."""
        return [
            slot
            for slot in range(len(self.slots))
            if self.current(slot).processes[0].poll() is not None
        ]

    def slot_of_last_sender(self, arrivals: list[Arrival]) -> int | None:
        """The slot of the replica that sent the newest message, if it still runs."""
        slots = {int(self.current(slot).processes[0].pid): slot for slot in range(len(self.slots))}
        for arrival in reversed(arrivals):
            pid = arrival.origin.removeprefix("gen").split("@")[0]
            if pid.isdigit():
                return slots.get(int(pid))
        return None

    def log_text(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")
            for replica in self.everyone()
            for path in replica.logfiles
            if path.exists()
        )

    def log_signs(self) -> dict[str, int]:
        text = self.log_text()
        return {key: text.count(needle) for key, needle in LOG_SIGNS.items()}

    def pids(self) -> dict[int, str]:
        """pid -> "slot.generation" of every process this side started."""
        return {
            replica.processes[0].pid: f"{slot}.{generation}"
            for slot, generations in enumerate(self.slots)
            for generation, replica in enumerate(generations)
        }


class Collector(threading.Thread):
    """Takes every message off the broker queues as it arrives, and stamps the moment.

    Each message is moved (`LMOVE`, atomic) to a `<queue>.collected` list rather than
    popped, so a reply lost when the broker is killed mid-command loses no message: the
    lists are read back at the end, and a message found only there counts as arriving then.
    """

    poll = 0.01
    batch = 50

    def __init__(self, broker_url: str, queues: list[str]) -> None:
        super().__init__(daemon=True)
        self.broker_url = broker_url
        self.queues = queues
        self.received: dict[str, list[Arrival]] = {q: [] for q in queues}
        self._raw: dict[str, list[bytes]] = {q: [] for q in queues}
        #: Messages found only in a `.collected` list: their LMOVE reply was lost.
        self.recovered: dict[str, int] = dict.fromkeys(queues, 0)
        self._stop_event = threading.Event()

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(self.broker_url, socket_timeout=2, socket_connect_timeout=1)

    def _take(self, client: redis.Redis) -> int:
        """Move what is on the queues now, up to `batch` messages a queue; return how many
        messages came. One round trip per message would fall seconds behind a burst of
        thousands, and stamp them that late."""
        pipe = client.pipeline(transaction=False)
        for queue in self.queues:
            for _ in range(self.batch):
                pipe.lmove(queue, f"{queue}.collected", "RIGHT", "LEFT")
        moved = pipe.execute()
        now = time.time()
        taken = 0
        queues = [queue for queue in self.queues for _ in range(self.batch)]
        for queue, raw in zip(queues, moved, strict=True):
            if raw is not None:
                self._raw[queue].append(cast("bytes", raw))
                self.received[queue].append(counting.parse_message(cast("bytes", raw), now))
                taken += 1
        return taken

    def run(self) -> None:
        client = self._client()
        while not self._stop_event.is_set():
            try:
                if not self._take(client):
                    time.sleep(self.poll)
            except (redis.ConnectionError, redis.TimeoutError):
                time.sleep(0.1)  # the broker is down: keep trying until it is back

    def finish(self) -> None:
        """Stop listening, take what is left, and reconcile with the `.collected` lists."""
        self._stop_event.set()
        self.join(5)
        client = self._client()
        while self._take(client):
            pass
        now = time.time()
        for queue in self.queues:
            kept = client.lrange(f"{queue}.collected", 0, -1)
            unseen = Counter(cast("list[bytes]", kept)) - Counter(self._raw[queue])
            for raw in unseen.elements():
                arrival = counting.parse_message(raw, now)
                self.received[queue].append(dataclasses.replace(arrival, recovered=True))
                self.recovered[queue] += 1
        client.close()

    def arrivals(self, queue: str) -> list[Arrival]:
        return list(self.received[queue])


@dataclass
class SideResult:
    """One side's tally, with what shows the faults really happened."""

    kind: str
    replicas: int
    tally: Tally
    processes_started: int
    senders: int
    log_signs: dict[str, int]
    last_args: dict[str, str]
    exited: list[int]
    fault_applies: bool = True
    #: After an outage of every replica: see `Run.recovery`.
    recovery: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "side": self.kind,
            "replicas": self.replicas,
            **self.tally.as_dict(),
            "processes_started": self.processes_started,
            "distinct_senders": self.senders,
            "replicas_that_exited": self.exited,
            "log_signs": self.log_signs,
            "fault_applies": self.fault_applies,
        } | ({} if self.recovery is None else {"recovery": self.recovery})


@dataclass
class ScenarioResult:
    key: str
    title: str
    mode: str
    seconds: float
    events: list[str]
    sides: list[SideResult]
    claim_timeout: float  # the replicas' safebeat_claim_timeout in this run

    def side(self, kind: str) -> SideResult:
        return next(s for s in self.sides if s.kind == kind)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.key,
            "title": self.title,
            "mode": self.mode,
            "seconds": round(self.seconds, 1),
            "claim_timeout_s": self.claim_timeout,
            "events": self.events,
            "sides": [side.as_dict() for side in self.sides],
        }


class Run:
    """One scenario's servers, sides, collector and clock of events."""

    def __init__(
        self,
        scenario: Scenario,
        mode: Mode,
        folder: Path,
        postgres: OwnedPostgres | None,
        seed: int,
    ) -> None:
        self.scenario = scenario
        self.mode = mode
        self.folder = folder
        self.postgres = postgres
        self.rng = random.Random(seed)
        self.events: list[str] = []
        self.began = time.time()
        self._server_log_from = self._server_log_size()
        self.fault_at: float | None = None
        self.fault_over_at: float | None = None
        #: Set when the store's state was moved into the past: (when, by how much).
        self.shifted: tuple[float, timedelta] | None = None
        self.warm_at = 0.0
        self.sides: list[Side] = []
        self.broker: OwnedRedis | None = None
        self.redis_store: OwnedRedis | None = None
        self.collector: Collector | None = None
        self.replicas = mode.baseline_replicas if scenario.key == "baseline" else mode.replicas
        count = mode.baseline_entries if scenario.key == "baseline" else mode.entries
        self.schedule = schedule_of(count)
        #: Crontab entries beside `schedule`: the scenarios that ask for them only.
        self.crontabs = crontab_entries(mode.outage_entries if scenario.crontabs else 0)

    # --- setting up -----------------------------------------------------------------------

    def open(self) -> None:
        self.broker = OwnedRedis(self.folder / "broker")
        stores = self.scenario.stores
        if self.mode.name == "short" and self.scenario.short_stores is not None:
            stores = self.scenario.short_stores
        kinds = [kind for kind in (POSTGRES, REDIS, SQLITE) if kind in stores]
        if self.scenario.with_stock and (
            self.mode.stock_everywhere or self.scenario.key == "baseline"
        ):
            kinds.append(STOCK)
        for kind in kinds:
            side = Side(
                kind=kind,
                folder=self.folder / kind.replace(" ", "-").lower(),
                broker_url=self.broker.url,
                queue=f"chaos-{kind.split()[0].lower()}-{uuid.uuid4().hex[:6]}",
                schedule=self.schedule,
                mode=self.mode,
                crontabs=len(self.crontabs),
            )
            side.store_url = self._store_url(side)
            self.sides.append(side)
        self.collector = Collector(self.broker.url, [side.queue for side in self.sides])
        self.collector.start()

    def _store_url(self, side: Side) -> str | None:
        if side.kind == POSTGRES:
            assert self.postgres is not None
            url = self.postgres.create_database(f"chaos_{side.namespace.replace('-', '_')}")
            open_store(url).migrate()
            return url
        if side.kind == REDIS:
            if self.redis_store is None:
                self.redis_store = OwnedRedis(self.folder / "redis-store")
            return self.redis_store.url
        if side.kind == SQLITE:
            url = f"sqlite:///{self.folder}/safebeat.sqlite3"
            SqliteStore(url).migrate()
            return url
        return None

    def proxied(self, side: Side) -> str:
        """Put a TCP proxy between replica 0 of `side` and its store; return the proxy URL."""
        assert side.store_url is not None
        port = int(re.search(r":(\d+)/", side.store_url).group(1))  # type: ignore[union-attr]
        side.proxy = Proxy("127.0.0.1", port)
        return side.store_url.replace(f":{port}/", f":{side.proxy.port}/", 1)

    def proxied_broker(self, side: Side) -> str:
        """Put a TCP proxy between replica 0 of `side` and the broker; return the proxy URL."""
        assert self.broker is not None
        side.proxy = Proxy("127.0.0.1", self.broker.port)
        return self.broker.url.replace(f":{self.broker.port}/", f":{side.proxy.port}/", 1)

    def start(self) -> None:
        """Start every replica of every side at once; return once every side has sent every
        entry (so no fault lands before a store has even been registered with)."""
        for side in self.sides:
            for slot in range(self.replicas):
                self.scenario.prepare(self, side, slot)
                side.start(slot)
        for side in self.sides:
            for slot in range(self.replicas):
                side.current(slot).wait_started(timeout=120)
        assert self.collector is not None
        deadline = time.time() + 60
        while not all(
            set(self.schedule) <= {a.entry for a in self.collector.received[side.queue]}
            for side in self.sides
        ):
            assert time.time() < deadline, "a side sent nothing for a minute after starting"
            time.sleep(0.1)
        self.warm_at = time.time()
        self.event(f"{self.replicas} replicas per side running, every entry sent once")

    # --- during the run -------------------------------------------------------------------

    def event(self, text: str) -> None:
        self.events.append(f"{time.time() - self.began:6.1f}s {text}")

    def fault(self, text: str) -> None:
        if self.fault_at is None:
            self.fault_at = time.time()
        self.event(text)

    def fault_over(self, text: str) -> None:
        self.fault_over_at = time.time()
        self.event(text)

    def wait_resumed(self, limit: float) -> None:
        """Wait (at most `limit` s) until every safebeat side has sent every entry again."""
        since = self.fault_over_at if self.fault_over_at is not None else time.time()
        assert self.collector is not None
        deadline = time.time() + limit
        while time.time() < deadline:
            if all(
                set(self.schedule)
                <= {a.entry for a in self.collector.received[side.queue] if a.at > since}
                for side in self.safebeat_sides()
            ):
                self.event("every entry dispatched again")
                return
            time.sleep(0.2)
        self.event(f"not every entry dispatched again after {limit:g}s")

    def last_sender(self, side: Side) -> int:
        """The slot of the replica that published `side`'s newest message (else a random one)."""
        assert self.collector is not None
        slot = side.slot_of_last_sender(self.collector.received[side.queue])
        return self.rng.randrange(self.replicas) if slot is None else slot

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def scaled(self, seconds: float) -> float:
        return seconds * self.mode.scale

    def at_window_boundary(self, low: float = 0.005, high: float = 0.05) -> None:
        """Wait for the next whole second and `low` to `high` s more: when replicas are
        mid-tick (taking the lock and claiming in the first 15 ms, publishing after)."""
        now = time.time()
        self.sleep(1 - (now % 1) + self.rng.uniform(low, high))

    def safebeat_sides(self, *kinds: str) -> list[Side]:
        return [s for s in self.sides if not s.is_stock and (not kinds or s.kind in kinds)]

    # --- the end --------------------------------------------------------------------------

    def finish(self) -> ScenarioResult:
        end = time.time()
        exited = {side.kind: side.exited() for side in self.sides}
        self.event("stopping every replica")
        for side in self.sides:
            side.stop()
        assert self.collector is not None
        self.collector.finish()
        results = [self._count(side, end, exited[side.kind]) for side in self.sides]
        return ScenarioResult(
            self.scenario.key,
            self.scenario.title,
            self.mode.name,
            end - self.began,
            self.events,
            results,
            self.mode.claim_timeout,
        )

    def _server_log_size(self) -> int:
        if self.postgres is None or not self.postgres.log.exists():
            return 0
        return self.postgres.log.stat().st_size

    def _server_log_signs(self) -> dict[str, int]:
        """What the PostgreSQL server logged during this run (all PostgreSQL sides share it)."""
        if self.postgres is None or not self.postgres.log.exists():
            return {}
        with self.postgres.log.open("rb") as file:
            file.seek(self._server_log_from)
            text = file.read().decode(errors="replace")
        return {key: text.count(needle) for key, needle in SERVER_LOG_SIGNS.items()}

    def _arrivals(self, side: Side) -> list[Arrival]:
        """`side`'s messages; those that came before the store's state was moved into the
        past moved with it, window and arrival, as if they had come before the outage."""
        assert self.collector is not None
        arrivals = self.collector.arrivals(side.queue)
        if self.shifted is None:
            return arrivals
        moment, by = self.shifted
        return [
            dataclasses.replace(a, at=a.at - by.total_seconds(), window=a.window - by)
            if a.at < moment and a.window is not None
            else a
            for a in arrivals
        ]

    def recovery(self, arrivals: Sequence[Arrival], tally: Tally) -> dict[str, Any]:
        """After every replica was restarted at `fault_over_at`: see `counting.recovery`."""
        assert self.fault_over_at is not None
        groups = {name: policy_group(spec) for name, spec in self.crontabs.items()}
        return {
            "outage_hours": self.mode.outage_hours,
            "crontab_entries": len(self.crontabs),
        } | counting.recovery(
            arrivals, tally, restart=self.fault_over_at, groups=groups, interval=self.schedule
        )

    def _rules(self) -> dict[str, counting.Rule]:
        rules: dict[str, counting.Rule] = {n: s["every"] for n, s in self.schedule.items()}
        return rules | {name: slots_of(spec) for name, spec in self.crontabs.items()}

    def _count(self, side: Side, end: float, exited: list[int]) -> SideResult:
        assert self.collector is not None
        arrivals = self._arrivals(side)
        gap_from = self.fault_at if self.fault_at is not None else self.warm_at
        if self.scenario.stops_every_replica:
            gap_from = self.fault_over_at or gap_from  # stopped on purpose: from the restart
        gap = counting.failover_gap(arrivals, after=gap_from, until=end)
        if side.is_stock:
            tally = counting.count_stock(
                {name: spec["every"] for name, spec in self.schedule.items()},
                arrivals,
                start=self.warm_at,
                horizon=end - 1.0,
            )
        else:
            assert side.store_url is not None
            store = open_store(side.store_url)
            try:
                states = store.states(side.namespace)
                rows = store.history(side.namespace, limit=1_000_000)
            finally:
                store.close()
            tally = counting.count_safebeat(
                self._rules(),
                states,
                rows,
                arrivals,
                horizon=counting.utc(end - self.mode.settle),
            )
        tally.failover_gap = gap
        last_args: dict[str, str] = {}
        for arrival in sorted(arrivals, key=lambda a: a.at):
            last_args[arrival.entry] = arrival.args
        return SideResult(
            kind=side.kind,
            replicas=self.replicas,
            tally=tally,
            processes_started=sum(1 for _ in side.everyone()),
            senders=len({a.origin for a in arrivals}),
            log_signs=side.log_signs()
            | {"collector_recovered": self.collector.recovered[side.queue]}
            | (self._server_log_signs() if side.kind == POSTGRES else {}),
            last_args=last_args,
            exited=exited,
            fault_applies=not (side.is_stock and self.scenario.store_fault),
            recovery=self.recovery(arrivals, tally)
            if self.scenario.stops_every_replica and not side.is_stock
            else None,
        )

    def close(self) -> None:
        for side in self.sides:
            with contextlib.suppress(Exception):
                side.stop()
            if side.proxy is not None:
                side.proxy.close()
        if self.collector is not None and self.collector.is_alive():
            self.collector.finish()
        for server in (self.broker, self.redis_store):
            if server is not None:
                server.close()


@dataclass(frozen=True)
class Scenario:
    """A fault script: which stores it covers and what it does to every side."""

    key: str
    title: str
    stores: tuple[str, ...]
    act: Callable[[Run], None]
    #: The fault hits the store, which stock beat does not have.
    store_fault: bool = False
    #: Called before each replica starts (a skewed clock, a proxied URL).
    before_start: Callable[[Run, Side, int], None] | None = None
    #: Every replica adds the mode's `outage_entries` crontab entries.
    crontabs: bool = False
    #: Stock beats run beside it (where the mode runs them at all).
    with_stock: bool = True
    #: The fault stops every replica: the failover gap counts from the restart, and the
    #: side reports its recovery (`Run.recovery`).
    stops_every_replica: bool = False
    #: The replicas' safebeat_claim_timeout in this scenario, if not the mode's.
    claim_timeout: float | None = None
    #: The stores of the short mode (CI), if fewer than `stores` fit its time.
    short_stores: tuple[str, ...] | None = None

    def prepare(self, run: Run, side: Side, slot: int) -> None:
        if self.before_start is not None:
            self.before_start(run, side, slot)


def run_scenario(
    scenario: Scenario,
    mode: Mode,
    folder: Path,
    postgres: OwnedPostgres | None,
    seed: int = 0,
) -> ScenarioResult:
    """Run one scenario end to end; every process and server it started is stopped."""
    if scenario.claim_timeout is not None:
        mode = dataclasses.replace(mode, claim_timeout=scenario.claim_timeout)
    run = Run(scenario, mode, folder, postgres, seed)
    try:
        run.open()
        run.start()
        scenario.act(run)
        return run.finish()
    finally:
        run.close()
