"""A deterministic simulation of the whole protocol: beats, a broker, workers, faults.

One integer seed decides everything: how many beat replicas and workers, the entries and
their policies, the settings, the broker's acknowledgement mode, which faults strike and
where, and the order the simulated threads run in. Each simulated thread is a `Strand`
(a real thread that runs only while the simulator resumes it), all on one fake clock.

What is real code:
- beat: the tick engine `safebeat.Scheduler` delegates to (`TickEngine`, built from its
  parts: this replica, the store, the dispatcher), tick after tick (planner, claim
  rounds, the publishing thread's hand-off, the take-over pass, settling, hand-back,
  housekeeping, the guard and its backoffs), on the real memory store;
- workers: the real hook (`safebeat.worker.delivery.check_delivery`, `ended`, the real
  `LeaseRenewer.renew_now`) deciding with the real `start_execution` / `decide_start`,
  against the same store.

What is simulated: the broker (queues, acks early or late, redelivery after a visibility
timeout, refused publishes, a cut), the Celery request a worker hands the hook, the
task body (a duration and an outcome), the publishing thread (run in steps the seed
interleaves with the tick), the clock, and the faults: between any two store or broker
calls a beat may be SIGKILLed or SIGTERMed (Celery's handler: `close()`, SystemExit,
`close()` again), a store call may fail or succeed with its reply lost; a worker may be
killed or stall (shorter than a third of its lease, or longer than its lease), the
store's clock may jump forward, the broker may be cut.

The invariants (`Checker`) are checked as the history happens and at the end.

The store is the memory store unless `store` names a real one (`backends`: SQLite,
PostgreSQL or Redis, fresh for the seed and on the same fake clock), where the same
history meets the rules written in SQL and Lua.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest import mock

from celery import Celery
from celery.exceptions import Ignore, Reject

from safebeat.beat.dispatch import Dispatcher
from safebeat.beat.engine import EngineHooks, TickEngine
from safebeat.beat.message_fields import message_for
from safebeat.beat.tuning import Tuning
from safebeat.config import config_from_app
from safebeat.entries.app_entries import settings_source
from safebeat.errors import StoreUnavailable
from safebeat.identity import Replica, format_window, parse_window, task_id_for
from safebeat.record_rules import lease_alive
from safebeat.records import Status
from safebeat.stores.memory import MemoryStore
from safebeat.testing import FakeClock
from safebeat.worker import delivery
from safebeat.worker.leases import LeaseRenewer
from tests.simulation import strands
from tests.simulation.backends import Backend, open_backend
from tests.simulation.reopen import reopened
from tests.simulation.strands import Killed, Strand

NAMESPACE = "sim"
TASK = "sim.work"
START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)

#: Store calls a fault may strike (the others are reads no decision depends on).
FAULTY_CALLS = frozenset(
    {
        "tick",
        "record_publish",
        "release_claims",
        "heartbeat",
        "register",
        "start_execution",
        "renew_executions",
        "finish_execution",
    }
)
#: The worker calls that keep a run's lease: a blip never fails two of them in a row
#: (a store blip shorter than a third of the lease; longer outages are a stated limit).
LEASE_CALLS = frozenset({"renew_executions", "finish_execution"})

FAULT_KINDS = (
    "store-fail",
    "reply-lost",
    "beat-kill",
    "beat-term",
    "worker-kill",
    "worker-stall",
    "worker-long-stall",
    "clock-jump",
    "broker-cut",
    "publish-refused",
    "backlog",
)


class Violation(AssertionError):
    """An invariant broke: the message says which, the trace says how; `kind` and
    `details` let `diagnose` name the hole behind it."""

    def __init__(self, message: str, kind: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.kind = kind
        self.details = details


@dataclass
class Settings:
    """What the seed chose about the world."""

    beats: int
    workers: int
    concurrency: int
    acks_late: bool
    visibility: float | None  # Redis-like redelivery after this; None: at once on death
    claim_timeout: float
    lease: float
    entries: dict[str, dict[str, Any]]
    longest_task: float
    faults: dict[str, float]  # kind -> rate
    fault_time: float  # faults stop after this many seconds
    #: No worker runs before this (the "backlog" kind): the windows of each entry pile up
    #: in the broker, so several windows of a forbid entry are delivered at once.
    workers_from: float = 0.0

    @property
    def bound(self) -> float:
        """Seconds after the faults stop within which every claimed window completes.

        A restart (up to 60 s), a stale claim's take-over (1.5 claim timeouts and a tick), a
        dead run's lease, a broker redelivery, then runs that may queue behind each
        other (a forbid entry's windows, deferred copies one lease apart) and retries; with
        a backlog, the workers' late start on top.
        """
        redelivery = self.visibility or 0.0
        per_run = self.longest_task + 2 * self.lease
        base = 60 + 2 * self.claim_timeout + 3 * self.lease + redelivery + 4 * per_run + 60
        return self.workers_from + base


def choose(seed: int, faults: tuple[str, ...] | None = None) -> Settings:
    rng = random.Random(seed * 7919 + 1)
    claim_timeout = rng.choice([6.0, 12.0, 30.0])
    lease = rng.choice([6.0, 9.0, 15.0, 30.0])
    entries: dict[str, dict[str, Any]] = {}
    # A few entries, or many (so a tick claims several rounds and pipelines them).
    count = rng.randint(1, 4) if rng.random() < 0.7 else rng.randint(5, 12)
    for i in range(count):
        options: dict[str, Any] = {}
        if rng.random() < 0.4:
            options["overlap"] = "forbid"
        if rng.random() < 0.2:
            options["pause_after_failures"] = rng.randint(2, 4)
        entries[f"e{i}"] = {
            "task": TASK,
            "schedule": float(rng.choice([20, 30, 60] if count < 5 else [60, 120])),
            "options": {"safebeat": options},
        }
    # "backlog" only when asked for: the default mix draws as it did before it existed, so
    # the seeds kept as regressions replay the same histories.
    mix = tuple(k for k in FAULT_KINDS if k != "backlog" and rng.random() < 0.4)
    kinds = faults if faults is not None else mix
    rates = {
        "store-fail": 0.03,
        "reply-lost": 0.03,
        "beat-kill": 0.004,
        "beat-term": 0.004,
        "worker-kill": 0.004,
        "worker-stall": 0.004,
        "worker-long-stall": 0.002,
        "clock-jump": 0.003,
        "broker-cut": 0.004,
        "publish-refused": 0.05,
        "backlog": 1.0,  # not a rate: the workers start late (`Settings.workers_from`)
    }
    late = random.Random(seed * 104729 + 3).uniform(60, 110) if "backlog" in kinds else 0.0
    return Settings(
        beats=rng.randint(1, 3),
        workers=rng.randint(2, 3),
        concurrency=rng.randint(1, 2),
        acks_late=rng.random() < 0.5,
        visibility=rng.choice([None, 20.0, 60.0]),
        claim_timeout=claim_timeout,
        lease=lease,
        entries=entries,
        longest_task=2 * max(claim_timeout, lease),
        faults={kind: rates[kind] for kind in kinds},
        fault_time=rng.choice([120.0, 240.0]),
        workers_from=late,
    )


# --- bookkeeping of what ran -------------------------------------------------------------


@dataclass
class Body:
    """One execution of a task body, as the simulator saw it."""

    id: int
    worker: str
    entry: str
    window: str
    retries: int
    verdict: str  # run, takeover, untracked
    started: float
    ends: float
    running: bool = True
    outcome: str | None = None  # success, failure, retry once it ended
    excused: str | None = None  # an inherent limit applied to it (see Checker)
    end_recorded: bool = False
    end_lost: bool = False  # its end was not in the store once the hook returned
    parent: Body | None = None  # the run whose Celery retry started this one


@dataclass
class Message:
    id: int
    task_id: str
    entry: str
    window: str
    headers: dict[str, Any]
    retries: int
    eta: float
    origin: str
    parent: Body | None = None  # the run whose Celery retry this message is


class Checker:
    """The invariants, checked as events happen and at the end.

    - never two live runs of one window, nor of one entry with `overlap="forbid"`;
    - never one window under two task ids;
    - a window whose run finished never runs again;
    - once faults stop, every claimed window completes within `Settings.bound`.

    A run is excused (it may overlap another) only by a documented, inherent limit: it
    ran untracked because the store could not be reached (the hook fails open), or its
    worker stalled longer than a third of its lease, or the store's clock jumped by that
    much while it ran. Excused runs are counted, never reported.
    """

    def __init__(self, world: World) -> None:
        self.world = world
        self.bodies: list[Body] = []
        self.completed: dict[str, Body] = {}  # window key -> first clean completion
        self.task_ids: dict[str, str] = {}
        self.excused = 0

    def key(self, entry: str, window: str) -> str:
        return f"{entry}@{window}"

    def published(self, message: Message) -> None:
        key = self.key(message.entry, message.window)
        expected = task_id_for(NAMESPACE, message.entry, parse_window(message.window))
        if message.task_id != expected or self.task_ids.setdefault(key, message.task_id) != (
            message.task_id
        ):
            self.world.fail(
                f"window {key} published under a second task id {message.task_id}", "task-id"
            )

    def started(self, body: Body) -> None:
        self.bodies.append(body)
        key = self.key(body.entry, body.window)
        forbid = self.world.forbids(body.entry)
        for other in self.bodies:
            if other is body or not other.running:
                continue
            same_window = other.entry == body.entry and other.window == body.window
            same_entry = forbid and other.entry == body.entry
            if not (same_window or same_entry):
                continue
            if body.excused or other.excused:
                self.excused += 1
                continue
            what = "window" if same_window else "forbid entry"
            self.world.fail(
                f"two live runs of {what} {body.entry}: body #{other.id} ({other.window}, "
                f"{other.worker}, {other.verdict}) and body #{body.id} ({body.window}, "
                f"{body.worker}, {body.verdict})",
                "two-runs",
                first=other,
                second=body,
            )
        done = self.completed.get(key)
        if done is not None:
            if body.excused or done.excused:
                self.excused += 1
            else:
                self.world.fail(
                    f"window {key} ran again (body #{body.id}, {body.verdict}) after body "
                    f"#{done.id} finished it ({done.outcome})",
                    "ran-again",
                    first=done,
                    second=body,
                )

    def ended(self, body: Body) -> None:
        body.running = False
        if body.outcome in ("success", "failure"):
            key = self.key(body.entry, body.window)
            previous = self.completed.get(key)
            if previous is None or previous.excused:
                self.completed[key] = body

    def excuse_running(self, reason: str, worker: str | None = None) -> None:
        """An inherent fault struck: the runs in flight (of `worker`, or all) are excused."""
        for body in self.bodies:
            in_flight = body.running or not body.end_recorded
            if in_flight and worker in (None, body.worker) and body.excused is None:
                body.excused = reason

    def finish(self, backend: Backend, until: float) -> None:
        """Every window claimed before the faults stopped has completed by now."""
        rows = backend.rows(NAMESPACE)
        for row in sorted(rows, key=lambda r: (r.entry, r.window)):
            if row.task_id is None or row.status not in (Status.CLAIMED, Status.SENT):
                continue
            if (row.window - START).total_seconds() > until:
                continue
            key = self.key(row.entry, format_window(row.window))
            if key not in self.completed and not any(
                b.entry == row.entry and b.window == key.split("@", 1)[1] and b.excused
                for b in self.bodies
            ):
                self.world.fail(
                    f"window {key} never completed ({row.status.value}, attempts "
                    f"{row.attempts}, runs {row.runs}, started {row.started_at is not None}, "
                    f"finished {row.finished_at is not None}) within {self.world.s.bound:.0f}s "
                    "of the faults stopping",
                    "lost",
                    key=key,
                    started=row.started_at is not None,
                )


class SimStore(MemoryStore):
    """The memory store, noting for the diagnosis which take-overs took a live run."""

    def __init__(self, world: World, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._world = world
        self.live_takeovers: set[str] = set()

    def _reclaim(self, ns: Any, reclaim: Any, replica: Any, now: datetime) -> Any:
        alive = {
            key
            for key, r in ns.dispatches.items()
            if r.started_at is not None
            and r.finished_at is None
            and lease_alive(r.lease_until, now)
        }
        reclaimed, page = super()._reclaim(ns, reclaim, replica, now)
        for claim in reclaimed:
            if (claim.entry, claim.window) in alive:
                self.live_takeovers.add(f"{claim.entry}@{format_window(claim.window)}")
                self._world.log(
                    f"(a take-over of {claim.entry}@{format_window(claim.window)} "
                    "whose run holds a live lease)"
                )
        return reclaimed, page


# --- the broker --------------------------------------------------------------------------


class Broker:
    """Queues of task messages: FIFO by due time, acks early or late, redelivery."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.ready: list[Message] = []
        self.inflight: dict[int, tuple[Message, str, float]] = {}  # delivery -> msg, worker, at
        self.cut_until = 0.0
        self._ids = 0
        self._deliveries = 0

    @property
    def cut(self) -> bool:
        return self.world.now < self.cut_until

    def publish(self, message_fields: dict[str, Any], origin: str) -> None:
        self._ids += 1
        message = Message(id=self._ids, origin=origin, **message_fields)
        self.ready.append(message)
        self.world.checker.published(message)
        self.world.log(
            f"{origin} publish {message.entry}@{message.window} r{message.retries} "
            f"eta+{message.eta - self.world.now:.0f}s (msg {message.id})"
        )

    def fetch(self, worker: str) -> tuple[int, Message] | None:
        now = self.world.now
        due = [m for m in self.ready if m.eta <= now]
        if not due or self.cut:
            return None
        message = min(due, key=lambda m: (m.eta, m.id))
        self.ready.remove(message)
        self._deliveries += 1
        self.inflight[self._deliveries] = (message, worker, now)
        return self._deliveries, message

    def ack(self, delivery_id: int) -> None:
        self.inflight.pop(delivery_id, None)

    def requeue(self, delivery_id: int) -> None:
        found = self.inflight.pop(delivery_id, None)
        if found is not None:
            self.ready.append(found[0])

    def worker_died(self, worker: str) -> None:
        for delivery_id, (message, owner, at) in list(self.inflight.items()):
            if owner != worker:
                continue
            del self.inflight[delivery_id]
            if self.world.s.acks_late:
                eta = (
                    self.world.now
                    if self.world.s.visibility is None
                    else at + self.world.s.visibility
                )
                message.eta = max(message.eta, eta)
                self.ready.append(message)

    def redeliver_invisible(self) -> None:
        """Redis-like: an unacknowledged message comes back after the visibility timeout,
        whether or not its worker is alive (a second copy; the first may still be acked)."""
        visibility = self.world.s.visibility
        if not self.world.s.acks_late or visibility is None:
            return
        for delivery_id, (message, owner, at) in list(self.inflight.items()):
            if self.world.now >= at + visibility:
                self.inflight[delivery_id] = (message, owner, float("inf"))
                self.ready.append(message)
                self.world.log(f"broker redelivers msg {message.id} (visibility timeout)")


class SimConnection:
    """What beat sees of the broker connection: up or cut."""

    connection_errors: tuple[type[BaseException], ...] = ()
    connect_timeout = 4.0

    def __init__(self, beat: Beat) -> None:
        self._beat = beat

    @property
    def connected(self) -> bool:
        return not self._beat.world.broker.cut

    def ensure_connection(self, *args: Any, **kwargs: Any) -> SimConnection:
        self._beat.gate("connect")
        if self._beat.world.broker.cut:
            raise ConnectionError("sim: broker cut")
        return self

    def close(self) -> None:
        pass

    def release(self) -> None:
        pass


class SimPublisher:
    """Beat's `Publisher`, publishing to the simulated broker with the real message fields."""

    def __init__(self, beat: Beat) -> None:
        self._beat = beat

    def send(self, producer: Any, entry: Any, claim: Any, *, retry_policy: Any = None) -> None:
        beat, world = self._beat, self._beat.world
        beat.gate("publish")
        if world.broker.cut:
            raise ConnectionError("sim: broker cut")
        if world.fault("publish-refused"):
            world.log(f"{beat.name} publish of {claim.entry} refused")
            raise ConnectionError("sim: publish refused")
        if beat.terminating:
            beat.published_after_term += 1
            if beat.published_after_term > 1:
                world.fail(
                    f"{beat.name} handed {beat.published_after_term} messages to the broker "
                    "after SIGTERM (the round being published stops at its next message)",
                    "sigterm",
                )
        _, _, options = message_for(entry, claim)
        headers = dict(options["headers"])
        world.broker.publish(
            {
                "task_id": options["task_id"],
                "entry": claim.entry,
                "window": headers["safebeat_window"],
                "headers": headers,
                "retries": 0,
                "eta": world.now,
            },
            beat.name,
        )

    def forget_declarations(self) -> None:
        pass


class SimPublish:
    """One publish on a beat's publishing thread: a strand the simulator interleaves with
    the tick, stopped by `result(stop=True)` at its next check."""

    def __init__(self, beat: Beat, work: Callable[[Callable[[], bool]], Any]) -> None:
        self._beat = beat
        self._stopping = False
        self.strand = beat.world.spawn(
            f"{beat.name}-publish", lambda: work(lambda: self._stopping), owner=beat
        )

    def result(self, *, stop: bool = False) -> Any:
        if stop:
            self._stopping = True
        while not self.strand.done:
            self._beat.gate("waiting for the publishing thread")
        if self.strand.error is not None:
            raise self.strand.error
        return self.strand.value


class SimPublishThread:
    def __init__(self, beat: Beat) -> None:
        self._beat = beat
        self._current: SimPublish | None = None
        self.thread = None

    def start(self, work: Callable[[Callable[[], bool]], Any]) -> SimPublish:
        self._current = SimPublish(self._beat, work)
        return self._current

    def close(self) -> None:
        """Like the real one: wait for the publish under way (it finishes, time being
        frozen while the thread runs)."""
        current, self._current = self._current, None
        if current is not None:
            while not current.strand.done:
                self._beat.gate("closing: waiting for the publishing thread")


class SimLink:
    """The broker as beat's engine sees it (`BrokerLink`): the simulated connection."""

    def __init__(self, beat: Beat) -> None:
        self.connection = SimConnection(beat)
        self.producer = object()

    def forget_producer(self) -> None:
        pass


# --- processes ---------------------------------------------------------------------------


class StoreProxy:
    """One process's view of the shared store: every call goes through its gate."""

    def __init__(self, process: Process, store: MemoryStore) -> None:
        self._process = process
        self._store = store

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or name == "close":
            return attr
        process = self._process
        if name == "clock":
            return lambda: process.world.backend.call(name, attr)

        def call(*args: Any, **kwargs: Any) -> Any:
            process.gate(name)
            world = process.world
            if name in FAULTY_CALLS and process.may_fail(name) and world.fault("store-fail"):
                process.failed(name)
                world.log(f"{process.name} store {name} fails")
                raise StoreUnavailable(f"sim: {name} failed")
            result = world.backend.call(name, attr, *args, **kwargs)
            if name in FAULTY_CALLS and process.may_fail(name) and world.fault("reply-lost"):
                process.failed(name)
                world.log(f"{process.name} store {name} done, reply lost")
                raise StoreUnavailable(f"sim: {name} reply lost")
            process.succeeded(name)
            process.world.observe(process, name, args, result)
            return result

        return call


class Process:
    """A simulated process: its strands stop at gates, where faults may strike."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.dead = False
        self.frozen_until = 0.0
        self._failed: set[str] = set()

    def gate(self, what: str) -> None:
        strands.pause()
        if self.dead:
            raise Killed(self.name)

    def may_fail(self, call: str) -> bool:
        return not (call in LEASE_CALLS and call in self._failed)

    def failed(self, call: str) -> None:
        self._failed.add(call)

    def succeeded(self, call: str) -> None:
        self._failed.discard(call)


class Beat(Process):
    def __init__(self, world: World, name: str) -> None:
        super().__init__(world, name)
        self.link = SimLink(self)
        self.terminating = False
        self.term_pending = False
        self.published_after_term = 0
        self.engine: TickEngine | None = None

    def gate(self, what: str) -> None:
        strands.pause()
        world = self.world
        if self.dead:
            raise Killed(self.name)
        if self.terminating:
            return
        if world.fault("beat-kill"):
            world.log(f"{self.name} SIGKILL at {what}")
            world.kill(self)
            raise Killed(self.name)
        if world.fault("beat-term"):
            self.term_pending = True
        if self.term_pending and strands.current() is self.main:
            world.log(f"{self.name} SIGTERM at {what}")
            self.terminating = True
            if self.engine is not None:
                self.engine.close()  # Celery's handler: beat.sync() -> close()
            raise SystemExit(0)

    def run(self) -> None:
        world = self.world
        replica = Replica(self.name, 1, "0")
        try:
            engine = TickEngine(
                world.config,
                replica,
                dispatcher=Dispatcher(
                    publisher=SimPublisher(self),  # type: ignore[arg-type]
                    claim_timeout=world.config.claim_timeout,
                    replica=replica,
                    monotonic=world.clock.monotonic,
                ),
                broker=self.link,
                hooks=EngineHooks(
                    schedule_source=lambda: settings_source(world.app),
                    timezone=lambda: world.app.timezone,
                ),
                tuning=Tuning(),
                store=StoreProxy(self, world.backend.connect()),  # type: ignore[arg-type]
                monotonic=world.clock.monotonic,
                publish_thread=SimPublishThread(self),  # type: ignore[arg-type]
            )
            engine.tuning.first_round = 1  # every tick with two due entries pipelines
            self.engine = engine
            engine.setup()
            while True:
                sleep = engine.tick()
                world.sleep(self, max(sleep, 0.05))
        except SystemExit:
            if self.engine is not None:
                self.engine.close()  # Service.sync() once the loop unwound
            world.log(f"{self.name} exited")
            self.dead = True
            world.restarts.append((world.now + world.rng.uniform(5, 30), "Beat"))
        except Killed:
            self.dead = True


class Worker(Process):
    def __init__(self, world: World, name: str) -> None:
        super().__init__(world, name)
        self.renewer = SimRenewer(self)
        self.backoff = SimBackoff(world)
        self.running: list[tuple[Body, Any, int]] = []  # body, request, delivery id
        self.next_renewal = 0.0

    def run(self) -> None:
        try:
            self._loop()
        except Killed:
            self.dead = True

    def _loop(self) -> None:
        world = self.world
        while True:
            now = world.now
            for body, request, delivery_id in list(self.running):
                if body.ends <= now:
                    self.running.remove((body, request, delivery_id))
                    self._end(body, request, delivery_id)
            if now >= self.next_renewal:
                self.next_renewal = now + world.s.lease / 3
                self.renewer.renew_now()
            while len(self.running) < world.s.concurrency:
                self.gate("fetch")
                fetched = world.broker.fetch(self.name)
                if fetched is None:
                    break
                self._deliver(*fetched)
            wake = min([b.ends for b, _, _ in self.running] + [self.next_renewal, now + 0.5])
            world.sleep(self, max(wake - world.now, 0.05))

    def _deliver(self, delivery_id: int, message: Message) -> None:
        world = self.world
        request = SimRequest(message, self.name)
        task = SimTask(self, request)
        if not world.s.acks_late:
            world.broker.ack(delivery_id)
        body_id = world.next_body()
        try:
            delivery.check_delivery(task, installed=True)
        except Ignore:
            world.broker.ack(delivery_id)
            why = "deferred" if getattr(request, "_safebeat_deferred", False) else "duplicate"
            world.log(
                f"{self.name} skips msg {message.id} {message.entry}@{message.window} "
                f"r{message.retries} ({why})"
            )
            return
        except Reject:
            world.log(f"{self.name} rejects msg {message.id} (requeue)")
            world.broker.requeue(delivery_id)
            return
        execution = getattr(request, "_safebeat_execution", None)
        verdict = "untracked" if execution is None else execution.start.value
        rng = world.rng
        # Mostly short runs, some longer than the claim timeout and the lease.
        long = rng.random() < 0.2
        took = rng.uniform(5, world.s.longest_task) if long else rng.uniform(0.5, 5)
        body = Body(
            body_id,
            self.name,
            message.entry,
            message.window,
            message.retries,
            verdict,
            world.now,
            world.now + took,
        )
        body.parent = message.parent
        if execution is None:
            body.excused = "ran untracked (the hook fails open)"
        world.log(
            f"{self.name} starts body #{body.id} {message.entry}@{message.window} "
            f"r{message.retries} ({verdict}, msg {message.id})"
        )
        world.checker.started(body)
        self.running.append((body, request, delivery_id))

    def _end(self, body: Body, request: SimRequest, delivery_id: int) -> None:
        world, rng = self.world, self.world.rng
        roll = rng.random()
        state = (
            "SUCCESS" if roll < 0.8 else "FAILURE" if roll < 0.9 or body.retries >= 2 else "RETRY"
        )
        if state == "RETRY":
            try:
                self.gate("publish retry")
                if world.broker.cut or world.fault("publish-refused"):
                    raise ConnectionError("sim: retry refused")
                world.broker.publish(
                    {
                        "task_id": request.id,
                        "entry": body.entry,
                        "window": body.window,
                        "headers": dict(request.message.headers),
                        "retries": body.retries + 1,
                        "eta": world.now + rng.uniform(1, 10),
                        "parent": body,
                    },
                    self.name,
                )
            except ConnectionError:
                state = "FAILURE"
        body.outcome = {"SUCCESS": "success", "FAILURE": "failure", "RETRY": "retry"}[state]
        world.checker.ended(body)
        world.log(f"{self.name} body #{body.id} ends: {body.outcome}")
        task = SimTask(self, request)
        delivery.ended(task, state, None)
        body.end_recorded = True
        window = parse_window(body.window)
        row = next(
            (r for r in world.backend.rows(NAMESPACE, body.entry) if r.window == window), None
        )
        if (
            row is not None
            and row.finished_at is None
            and (row.worker or "").startswith(f"{self.name}:")
            and row.retries == body.retries
        ):
            body.end_lost = True
        world.broker.ack(delivery_id)


class SimRequest:
    """What Celery's request holds for the hook: custom headers become attributes."""

    def __init__(self, message: Message, worker: str) -> None:
        self.message = message
        self.id = message.task_id
        self.retries = message.retries
        self.hostname = worker
        self.is_eager = False
        self.headers = None
        for name, value in message.headers.items():
            setattr(self, name, value)


class SimTask:
    """What the hook uses of a Celery task: its app, request, `acks_late` and
    `signature_from_request`."""

    def __init__(self, worker: Worker, request: SimRequest) -> None:
        self.app = worker.world.app
        self.request = request
        self.name = TASK
        self.acks_late = worker.world.s.acks_late  # as Celery's task_acks_late sets it
        self._worker = worker

    def signature_from_request(
        self, request: SimRequest, countdown: float, headers: dict[str, Any]
    ) -> Any:
        worker = self._worker

        class Copy:
            def apply_async(self) -> None:
                world = worker.world
                worker.gate("publish deferred copy")
                if world.broker.cut or world.fault("publish-refused"):
                    world.refused_deferrals.add(f"{request.message.entry}@{request.message.window}")
                    world.log(f"{worker.name} deferred copy refused")
                    raise ConnectionError("sim: deferred copy refused")
                carried = {
                    k: v
                    for k, v in headers.items()
                    if k.startswith(("safebeat", "periodic", "celery_beat"))
                }
                world.broker.publish(
                    {
                        "task_id": request.id,
                        "entry": headers.get("safebeat_entry", request.message.entry),
                        "window": headers.get("safebeat_window", request.message.window),
                        "headers": carried,
                        "retries": request.retries,
                        "eta": world.now + countdown,
                    },
                    worker.name,
                )

        return Copy()


class SimRenewer(LeaseRenewer):
    """The real renewer, its rounds driven by the worker's loop instead of a thread."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(store=lambda config: worker.store)
        self._thread = mock.sentinel.thread  # never start the real thread


class SimBackoff(delivery.StoreBackoff):
    """The hook's store backoff on the simulated clock."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self._world = world

    def ready(self) -> bool:
        return not self._backoff.waiting(self._world.clock.monotonic())

    def failed(self, exc: Exception) -> None:
        self._backoff.failed(self._world.clock.monotonic())


# --- the world ---------------------------------------------------------------------------


class World:
    def __init__(
        self,
        seed: int,
        settings: Settings | None = None,
        trace: bool = True,
        store: str = "memory",
    ) -> None:
        self.seed = seed
        self.s = settings or choose(seed)
        self.rng = random.Random(seed)
        self.clock = FakeClock(START)
        self.store_offset = 0.0
        self.lines: list[str] = []
        self.trace = trace
        self.backend = open_backend(
            store,
            clock=lambda: self.clock.now() + timedelta(seconds=self.store_offset),
            namespace=NAMESPACE,
            log=self.log,
            memory=lambda clock: SimStore(self, clock=clock),
        )
        self.store = self.backend.store
        self.refused_deferrals: set[str] = set()
        self.broker = Broker(self)
        self.checker = Checker(self)
        self.strands: list[tuple[Strand, Process]] = []
        self.beats: list[Beat] = []
        self.workers: list[Worker] = []
        self.faults_seen: dict[str, int] = {}
        self._bodies = 0
        self._generation = 0
        self._fault_second = -1
        self.violation: Violation | None = None
        self.restarts: list[tuple[float, str]] = []  # (at, kind)
        app = Celery("sim", broker="memory://", set_as_current=False)
        app.conf.update(
            beat_schedule=self.s.entries,
            safebeat_url="memory://sim-unused",
            safebeat_namespace=NAMESPACE,
            safebeat_claim_timeout=self.s.claim_timeout,
            safebeat_execution_lease=self.s.lease,
        )
        self.app = app
        self.config = config_from_app(app)

    # time and faults

    @property
    def now(self) -> float:
        return (self.clock.now() - START).total_seconds()

    def faulty(self) -> bool:
        return self.now < self.s.fault_time

    def fault(self, kind: str) -> bool:
        rate = self.s.faults.get(kind)
        if rate is None or not self.faulty() or self.rng.random() >= rate:
            return False
        self.faults_seen[kind] = self.faults_seen.get(kind, 0) + 1
        return True

    def log(self, line: str) -> None:
        if self.trace:
            self.lines.append(f"{self.now:7.2f} {line}")

    def fail(self, message: str, kind: str, **details: Any) -> None:
        # Kept as well as raised: code under test may catch it (a publish error is
        # recorded on its claim), and the loop raises it once the strand stops.
        if self.violation is None:
            self.violation = Violation(message, kind, details)
        raise self.violation

    def forbids(self, entry: str) -> bool:
        return self.s.entries[entry]["options"]["safebeat"].get("overlap") == "forbid"

    def next_body(self) -> int:
        self._bodies += 1
        return self._bodies

    def observe(self, process: Process, call: str, args: tuple[Any, ...], result: Any) -> None:
        """Trace what a store call did (and note what the diagnosis needs)."""
        if call == "tick" and result is not None:
            claimed = [f"{c.entry}@{format_window(c.window)}" for c in result.claimed]
            taken = [f"{c.entry}@{format_window(c.window)}" for c in result.reclaimed]
            if claimed or taken:
                self.log(f"{process.name} claims {claimed} takes over {taken}")
        elif call == "record_publish":
            self.log(f"{process.name} records {len(args[1])} sent")

    # processes

    def spawn(self, name: str, body: Callable[[], object], owner: Process) -> Strand:
        strand = Strand(name, body)
        self.strands.append((strand, owner))
        return strand

    def start_beat(self) -> None:
        self._generation += 1
        beat = Beat(self, f"beat{self._generation}")
        beat.main = self.spawn(beat.name, beat.run, beat)
        self.beats.append(beat)

    def start_worker(self) -> None:
        self._generation += 1
        worker = Worker(self, f"w{self._generation}")
        worker.store = StoreProxy(worker, self.backend.connect())
        worker.main = self.spawn(worker.name, worker.run, worker)
        self.workers.append(worker)

    def kill(self, process: Process) -> None:
        process.dead = True
        if isinstance(process, Worker):
            for body, _, _ in process.running:
                body.running = False
                self.checker.ended(body)
            process.running.clear()
            self.broker.worker_died(process.name)
        # A killed worker comes back after up to a minute: messages queue up meanwhile.
        longest = 60 if isinstance(process, Worker) else 30
        self.restarts.append((self.now + self.rng.uniform(5, longest), type(process).__name__))

    def sleep(self, process: Process, seconds: float) -> None:
        strand = strands.current()
        assert strand is not None
        strand.wake_at = self.now + seconds
        process.gate("sleep")

    def current_worker(self) -> Worker:
        strand = strands.current()
        for candidate, process in self.strands:
            if candidate is strand and isinstance(process, Worker):
                return process
        raise RuntimeError("the worker hook ran outside a simulated worker")

    @contextmanager
    def hook(self) -> Iterator[None]:
        """The worker hook's process-wide state (its renewer, its store backoff, its
        store), each worker's own: looked up by the simulated thread that asks."""
        world = self

        class PerWorker:
            def __init__(self, name: str) -> None:
                self._name = name

            def __getattr__(self, attr: str) -> Any:
                return getattr(getattr(world.current_worker(), self._name), attr)

        with ExitStack() as stack:
            stack.enter_context(mock.patch.object(delivery, "renewer", PerWorker("renewer")))
            stack.enter_context(mock.patch.object(delivery, "backoff", PerWorker("backoff")))
            stack.enter_context(
                mock.patch.object(
                    delivery,
                    "store_of",
                    side_effect=lambda app: (self.config, self.current_worker().store),
                )
            )
            stack.enter_context(mock.patch.object(delivery, "config_of", return_value=self.config))
            yield

    # the loop

    def run(self) -> None:
        s = self.s
        for _ in range(s.beats):
            self.start_beat()
        for _ in range(s.workers):
            if s.workers_from:
                self.restarts.append((s.workers_from, "Worker"))
            else:
                self.start_worker()
        end = s.fault_time + s.bound
        try:
            with self.hook():
                self._loop(end)
            self.checker.finish(self.backend, s.fault_time)
        finally:
            self._stop()

    def _loop(self, end: float) -> None:
        while self.now < end:
            self._world_faults()
            self._rounds()
            self.broker.redeliver_invisible()
            wakes = [st.wake_at for st, p in self.strands if not st.done and st.wake_at is not None]
            step = min([w - self.now for w in wakes] + [0.5])
            self.clock.advance(max(step, 0.01))

    def _rounds(self) -> None:
        for _ in range(10_000):
            ready = [
                (st, p)
                for st, p in self.strands
                if not st.done
                and (p.dead or (p.frozen_until <= self.now and (st.wake_at or 0) <= self.now))
            ]
            if not ready:
                return
            self.rng.shuffle(ready)
            for strand, _ in ready:
                strand.wake_at = None
                strand.resume()
                if self.violation is not None:
                    raise self.violation
                if strand.error is not None and not isinstance(strand.error, Killed | SystemExit):
                    raise strand.error
            self.strands = [(st, p) for st, p in self.strands if not st.done]
        raise RuntimeError("simulated threads never went to sleep")

    def _world_faults(self) -> None:
        """Restarts when due; faults of the whole world, decided once a simulated second."""
        s = self.s
        if int(self.now) == self._fault_second:
            return
        self._fault_second = int(self.now)
        for at, kind in list(self.restarts):
            if at <= self.now:
                self.restarts.remove((at, kind))
                self.start_beat() if kind == "Beat" else self.start_worker()
        live_workers = [w for w in self.workers if not w.dead and w.frozen_until <= self.now]
        live_beats = [b for b in self.beats if not b.dead]
        if live_workers and self.fault("worker-kill"):
            worker = self.rng.choice(live_workers)
            self.log(f"{worker.name} killed")
            self.kill(worker)
        if live_workers and self.fault("worker-stall"):
            worker = self.rng.choice(live_workers)
            worker.frozen_until = self.now + self.rng.uniform(0.5, s.lease / 4)
            self.log(f"{worker.name} stalls until {worker.frozen_until:.1f}")
        if live_workers and self.fault("worker-long-stall"):
            worker = self.rng.choice(live_workers)
            worker.frozen_until = self.now + self.rng.uniform(1.2, 2) * s.lease
            self.checker.excuse_running("its worker stalled longer than its lease", worker.name)
            self.log(
                f"{worker.name} stalls until {worker.frozen_until:.1f} (longer than its lease)"
            )
        if self.fault("clock-jump"):
            if self.rng.random() < 0.5:
                jump = self.rng.uniform(0.5, s.lease / 4)
            else:
                jump = self.rng.uniform(s.lease, 3 * s.lease)
                self.checker.excuse_running("the store clock jumped past its lease")
            self.store_offset += jump
            self.log(f"store clock jumps {jump:.1f}s")
        if self.fault("broker-cut"):
            self.broker.cut_until = self.now + self.rng.uniform(3, 40)
            self.log(f"broker cut until {self.broker.cut_until:.1f}")
        del live_beats

    def _stop(self) -> None:
        for _, process in self.strands:
            process.dead = True
        for _ in range(100):
            pending = [st for st, _ in self.strands if not st.done]
            if not pending:
                break
            for strand in pending:
                strand.resume()
        for strand, _ in self.strands:
            strand.join()


def diagnose(world: World, violation: Violation) -> str:  # noqa: PLR0911 - one answer per hole
    """Which of issue 29's holes a violation comes from, as far as the history shows."""
    kind, details = violation.kind, violation.details
    if kind == "sigterm":
        return "hole 5 (SIGTERM does not stop the round)"
    if kind in ("two-runs", "ran-again"):
        first, second = details["first"], details["second"]
        key = world.checker.key(second.entry, second.window)
        if kind == "ran-again" and first.end_lost:
            return "hole 2 (the end of a run was not recorded; it ran again)"
        if second.verdict == "run" and second.retries > 0:
            return "hole 3 (a retry's RUN beside a live run or after the end)"
        if key in world.backend.live_takeovers or (
            kind == "two-runs" and first.entry == second.entry and first.window != second.window
        ):
            return "hole 1 (the take-over cleared a live run's lease)"
        return "other"
    if kind == "lost":
        if details["key"] in world.refused_deferrals and not details["started"]:
            return "hole 4 (acks early + forbid: a refused deferral is lost)"
        return "other"
    return "other"


def simulate(
    seed: int,
    settings: Settings | None = None,
    store: str = "memory",
    reopen: tuple[str, ...] = (),
) -> World:
    """Run one seed's history against `store` (see `backends`), with the holes in
    `reopen` put back as they were before their fixes (see `reopen`); raises Violation
    (with `world.lines` as its trace)."""
    random.seed(seed)  # the code under test draws jitter from the global generator
    with reopened(reopen, store):
        world = World(seed, settings, store=store)
        try:
            world.run()
        except Violation as exc:
            exc.world = world  # type: ignore[attr-defined]
            raise
        finally:
            world.backend.close()
    return world
