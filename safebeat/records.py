"""The records safebeat keeps about a schedule.

These are what a store holds and returns (entry states, claims, dispatch rows, replicas)
and what the scheduler and the worker hook decide from. Nothing here does I/O: the
stores (`safebeat.stores`) read and write these records; the pure rules every backend
applies to them (`decide_start`, `fenced`, ...) are in `safebeat.record_rules`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from safebeat.facts import Dispatched, LiveRun
from safebeat.windows.overlap import queued_since, running_since


class Status(str, enum.Enum):
    """Where a dispatch row stands."""

    CLAIMED = "claimed"  # claim committed, publish not confirmed yet
    SENT = "sent"  # published to the broker
    FAILED = "failed"  # publishing failed for a reason retrying cannot fix (recorded error)
    SKIPPED = "skipped"  # not dispatched, by policy (reason says which)


class Outcome(str, enum.Enum):
    """How one execution of a window ended, as the worker hook saw it."""

    SUCCESS = "success"
    FAILURE = "failure"
    RETRY = "retry"  # the task asked Celery to retry; a later retry of the window may run


class Start(str, enum.Enum):
    """The answer of `Store.start_execution`: may this delivery of a window run?"""

    RUN = "run"  # first start, or a Celery retry of the window: run the body
    TAKEOVER = "takeover"  # the previous run's lease expired without a finish: run the body
    DEFER = "defer"  # a run of this window (or, for `forbid`, of the entry) is alive: later
    DUPLICATE = "duplicate"  # the window's run finished: skip the body
    UNKNOWN = "unknown"  # no dispatched window with this key: run the body, untracked


# Records that come one per entry or per window have slots: a replica holds 100,000s of
# them at registration and thousands per tick, and a dict each doubles their size.
@dataclass(frozen=True, slots=True)
class Definition:
    """What one replica believes an entry is: its schedule text and a digest of everything."""

    name: str
    schedule: str
    digest: str


@dataclass(frozen=True, slots=True)
class EntryState:
    """The shared state of one entry, the same for every replica.

    `anchor` is the origin of interval windows, fixed at first registration.
    `defined_at` is when the current definition was registered: windows at or before it
    are never dispatched, so a start or a changed definition fires nothing as a surprise.
    `last_window` is the newest window decided (claimed or skipped) by any replica.
    `schedule` and `digest` are the definition last registered (see Store.register).
    `live_run` and `newest_dispatched` are facts the store read about the entry's dispatch
    rows (`safebeat.facts`), or None; the overlap rules derive what they need from them
    (`safebeat.windows.overlap`: `running_since`, `queued_since`).
    `paused` is set by Store.set_paused: the scheduler skips the windows of a paused entry,
    up to `paused_until` when that is set (see `pause_ends`); `pause_note` is the operator's
    reason, for status pages.
    `unreadable` says why the store could not read this entry's state back (a pause end
    past the year 9999 written by an older version, a row changed by hand), or is None:
    such a state holds only its name and placeholders, and beat puts the entry aside as
    broken while every other entry runs (`safebeat.stores.decoding`).
    """

    name: str
    anchor: datetime
    defined_at: datetime
    last_window: datetime | None
    digest: str
    schedule: str
    live_run: LiveRun | None = None
    paused: bool = False
    paused_until: datetime | None = None
    pause_note: str | None = None
    newest_dispatched: Dispatched | None = None
    unreadable: str | None = None

    @property
    def running_since(self) -> datetime | None:
        """`windows.running_since` of the live run: for status pages."""
        return running_since(self.live_run)

    @property
    def queued_since(self) -> datetime | None:
        """`windows.queued_since` of the newest dispatched window: for status pages."""
        return queued_since(self.newest_dispatched)

    def paused_at(self, now: datetime) -> bool:
        """Whether the entry is paused at store time `now`: a pause with an end is over
        from `paused_until` on, with no write needed (see `pause_ends`)."""
        return self.paused and (self.paused_until is None or now < self.paused_until)

    @property
    def decided_until(self) -> datetime:
        """Windows at or before this instant are already decided."""
        if self.last_window is None or self.last_window < self.defined_at:
            return self.defined_at
        return self.last_window


@dataclass(frozen=True)
class Pause:
    """An entry's pause as the operator tools pass it to `AdminStore.set_paused`: the flag,
    the instant it ends by itself (None: until resumed) and the operator's note. A resume
    clears all three in the store (its note goes to the audit trail only)."""

    paused: bool
    until: datetime | None = None
    note: str | None = None

    @property
    def action(self) -> str:
        """What storing it does, for the store's error messages."""
        return "pause an entry" if self.paused else "resume an entry"


@dataclass(frozen=True, slots=True)
class NewClaim:
    """A window this replica wants to dispatch."""

    entry: str
    window: datetime
    task_id: str
    task_name: str


@dataclass(frozen=True, slots=True)
class NewSkip:
    """Windows `[first, window]` of an entry not dispatched, for `reason`; keyed by `window`."""

    entry: str
    window: datetime
    first: datetime
    count: int | None
    reason: str


@dataclass(frozen=True)
class TickPlan:
    """What the planner decided under the tick lock."""

    claims: Sequence[NewClaim] = ()
    skips: Sequence[NewSkip] = ()
    advances: Mapping[str, datetime] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StaleMark:
    """A place in the order a take-over pass reads stale claims in: claim time, then row
    id (`Reclaim.after`, `ReclaimPage.resume`)."""

    claimed_at: datetime
    id: int


@dataclass(frozen=True)
class Reclaim:
    """Ask a tick to take over the namespace's claims left unsent for longer than `timeout`
    (and runs whose lease expired), oldest first, at most `limit`, of entries in `defines`.

    The store finds those claims itself, through an index by claim time, so a pass never
    costs what the entries do. It only asks `entry in defines` of each stale claim it
    finds (never iterates, sizes or sends `defines`): a claim of an entry this replica
    does not define is left alone, for a replica that defines it.

    One pass reads at most `page` stale claims, in the order (claim time, row id), the
    first after `after` (None: from the oldest), so the work inside the tick's lock never
    grows with how many claims went stale (an outage of the broker can leave 100,000).
    Where the pass ended comes back as the tick's `ReclaimPage`; beat passes its `resume`
    as the next pass's `after`, so claims behind a page of other replicas' entries (or of
    entries nobody defines any more) are reached a page per pass, and a pass that reads to
    the end starts the next one from the oldest again."""

    defines: Container[str]
    timeout: timedelta
    limit: int = 1000
    page: int = 4000
    after: StaleMark | None = None

    def __post_init__(self) -> None:
        if self.limit < 1 or self.page < 1:
            raise ValueError(
                f"Reclaim needs a limit and a page of at least 1 claim "
                f"(got limit={self.limit}, page={self.page})"
            )


@dataclass(frozen=True, slots=True)
class StaleClaim:
    """One stale claim a take-over pass read: its row, entry and claim time."""

    id: int
    entry: str
    claimed_at: datetime

    @property
    def mark(self) -> StaleMark:
        return StaleMark(self.claimed_at, self.id)


@dataclass(frozen=True)
class ReclaimPage:
    """What one take-over pass read: `read` stale claims (at most `Reclaim.page`), and
    where the next pass goes on (`resume`, its `Reclaim.after`): after the last claim this
    pass looked at, or None when it read to the end, so the next starts from the oldest."""

    read: int
    resume: StaleMark | None


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed window this replica now owes a publish for."""

    id: int
    entry: str
    window: datetime
    task_id: str
    attempts: int


@dataclass(frozen=True)
class TickResult:
    """The outcome of one locked tick: `states` after the plan, and the plan itself; with
    a take-over pass, the page of stale claims it read (`Reclaim`)."""

    now: datetime
    states: Mapping[str, EntryState]
    claimed: Sequence[Claim]
    reclaimed: Sequence[Claim]
    plan: TickPlan = field(default_factory=TickPlan)
    reclaim_page: ReclaimPage | None = None  # what the take-over pass read, if one ran


@dataclass(frozen=True)
class Registration:
    """The entries whose definition this registration changed. Beat needs nothing more,
    so a store reads back no entry's state: `states` gives them to whoever wants them."""

    changed: Mapping[str, str]  # entry -> digest it had before this replica's definition


@dataclass(frozen=True, slots=True)
class DispatchRecord:
    """One row of dispatch history."""

    id: int
    entry: str
    window: datetime
    status: Status
    task_id: str | None
    task_name: str | None
    reason: str | None
    skipped_from: datetime | None
    skipped_count: int | None
    replica: str
    host: str
    pid: int
    claimed_at: datetime
    sent_at: datetime | None
    attempts: int
    error: str | None
    # Execution, as recorded by the worker hook (safebeat.worker):
    started_at: datetime | None = None  # store time the latest execution started
    finished_at: datetime | None = None  # store time it ended (None: running, or lost)
    outcome: Outcome | None = None
    runtime: timedelta | None = None  # as measured by the worker
    worker: str | None = None  # `nodename:pid` of the process that ran it
    retries: int | None = None  # Celery's retry number of the latest execution
    runs: int = 0  # executions started: 1 + retries + takeovers
    duplicates: int = 0  # deliveries skipped because the window already ran or runs
    lease_until: datetime | None = None  # the running execution is alive until then


@dataclass(frozen=True)
class LeasedRun:
    """One execution of a window: who (`worker`, `nodename:pid`) started which window, on
    which Celery retry. What the worker hook starts, renews the lease of and finishes
    (`ExecutionStore`)."""

    entry: str
    window: datetime
    worker: str
    retries: int

    def holds(self, record: DispatchRecord) -> bool:
        """Whether `record`'s latest execution is this run and has not finished: the rows
        `renew_executions` and `finish_execution` change (a run taken over, superseded by a
        retry or finished changes nothing)."""
        return (
            record.worker == self.worker
            and record.retries == self.retries
            and record.finished_at is None
        )


@dataclass(frozen=True)
class RunEnd:
    """How an execution ended, as its worker saw it (`ExecutionStore.finish_execution`).

    `runtime` is measured by the worker; `detail`, if given, says what went wrong (a
    command's exit status, a hard time limit) and is kept in the row's `error`.
    """

    outcome: Outcome
    runtime: timedelta
    detail: str | None = None


@dataclass(frozen=True)
class ReplicaRecord:
    """A replica's last heartbeat."""

    replica: str
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    definitions: Mapping[str, str]  # entry -> digest this replica runs


class AuditAction(str, enum.Enum):
    """What an operator did, as the audit trail records it."""

    PAUSE = "pause"
    RESUME = "resume"
    TRIGGER = "trigger"
    BACKFILL = "backfill"
    SKIP = "skip"
    PRUNE = "prune"
    MIGRATE = "migrate"


@dataclass(frozen=True)
class AuditEvent:
    """One operator action to record: who (`actor`), what, on which entry and windows, and
    the operator's note. The store adds the instant (its clock) and an id."""

    actor: str
    action: AuditAction
    entry: str | None = None
    windows: tuple[datetime, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class AuditRecord:
    """One line of the audit trail: an `AuditEvent` as the store recorded it, at store time `at`."""

    id: int
    at: datetime
    actor: str
    action: AuditAction
    entry: str | None
    windows: tuple[datetime, ...]
    note: str | None

    @classmethod
    def of(cls, id: int, at: datetime, event: AuditEvent) -> AuditRecord:
        """The record of `event`, recorded as `id` at `at`."""
        return cls(id, at, event.actor, event.action, event.entry, event.windows, event.note)


Planner = Callable[[datetime, Mapping[str, EntryState]], TickPlan]


def system_clock() -> datetime:
    """This host's clock, aware UTC: "now" for stores without a server clock."""
    return datetime.now(timezone.utc)


def _with_last_window(state: EntryState, window: datetime) -> EntryState:
    """`replace(state, last_window=window)`, several times faster: a burst makes thousands."""
    return EntryState(
        state.name,
        state.anchor,
        state.defined_at,
        window,
        state.digest,
        state.schedule,
        state.live_run,
        state.paused,
        state.paused_until,
        state.pause_note,
        state.newest_dispatched,
        state.unreadable,
    )


# The rules over these records moved to safebeat.record_rules; 0.1.0 code imported them from
# here (`from safebeat.records import decide_start`), so they are still found here.
_RULES = frozenset(
    {
        "consecutive_failures",
        "decide_start",
        "fence",
        "fenced",
        "lease_alive",
        "pause_ends",
        "released_age",
        "run_alive",
        "states_after",
        "take_over_page",
        "unsent_and_stale",
    }
)


if TYPE_CHECKING:  # what type checkers see of them (at run time: __getattr__)
    from safebeat.record_rules import consecutive_failures as consecutive_failures  # noqa: PLC0414
    from safebeat.record_rules import decide_start as decide_start  # noqa: PLC0414
    from safebeat.record_rules import fence as fence  # noqa: PLC0414
    from safebeat.record_rules import fenced as fenced  # noqa: PLC0414
    from safebeat.record_rules import lease_alive as lease_alive  # noqa: PLC0414
    from safebeat.record_rules import pause_ends as pause_ends  # noqa: PLC0414
    from safebeat.record_rules import released_age as released_age  # noqa: PLC0414
    from safebeat.record_rules import run_alive as run_alive  # noqa: PLC0414
    from safebeat.record_rules import states_after as states_after  # noqa: PLC0414
    from safebeat.record_rules import take_over_page as take_over_page  # noqa: PLC0414
    from safebeat.record_rules import unsent_and_stale as unsent_and_stale  # noqa: PLC0414


def __getattr__(name: str) -> object:
    if name in _RULES:
        from safebeat import record_rules  # noqa: PLC0415 (it imports this module)

        return getattr(record_rules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
