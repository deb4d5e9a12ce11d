"""Counting every window: broker messages and dispatch rows against the windows each entry had.

Pure functions, no I/O: the runner hands in what it collected (every message that reached
the broker, with the moment it arrived; the store's dispatch rows and entry states) and
gets back a `Tally` per side of the comparison.

safebeat's side is counted window by window. Each entry's windows are its grid after the
`defined_at` of its definition and up to the horizon (the end of the run less the time a
stale claim needs to be re-published): `anchor + k * every` for an interval entry, the
slots of `tests.chaos.crontabs.CronSlots` for a crontab entry. Each window is then
exactly one of:

- dispatched once: one message on the broker (possibly published by a replica that took
  the claim over after `safebeat_claim_timeout`: counted as taken over too);
- re-published: more than one copy, all with the window's task id, and its dispatch row
  records `attempts > 1` (a claim taken over after `safebeat_claim_timeout`: the
  at-least-once part of the promise, which the worker hook skips);
- dispatched more than once: more than one copy without such a record (must be 0);
- skipped by policy: no message, inside a span the store recorded as skipped, by reason;
- failed: no message, its row recorded `failed` with the publish error;
- missing: no message and no recorded reason (must be 0).

A message for an instant that is not a window of its entry (off the grid, before the
definition, an unknown entry) is counted as unexpected (must be 0); a window both sent and
recorded as skipped is a contradiction (must be 0).

A window's lag is its first timed message less the window. The largest is kept for all
windows, and apart for the windows taken over and for those that went out from their
first claim: a fault may make the first wait a claim timeout, never the second. The
windows taken over are counted per entry too, with the most attempts any row records (a
claim taken over twice records 3).

Stock beat has no window identity: each replica computes its own runs from its own last
run. Its side is counted from arrival times: the windows are the same grid cut to the
same span, a run of consecutive arrivals of one entry more than one period apart means
windows nobody sent (`round(gap / every) - 1` of them), and every message beyond one per
window that was sent is a copy.

Each entry's windows, oldest first, also leave a trace of one letter per window in
`Tally.outcomes` (`OUTCOME_CODES`), which `after_outage` reads against what each
missed-window policy must do after a long outage.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from safebeat.identity import parse_window
from safebeat.stores.protocols import DispatchRecord, EntryState, Status
from tests.chaos.crontabs import CronSlots

#: An entry's windows: an interval in seconds, or the slots of a crontab.
Rule = float | CronSlots
#: One letter per window in `Tally.outcomes`: dispatched once, re-published with its id,
#: sent more than once, failed, missing; skipped as `missed`, `catchup_limit`, or else.
OUTCOME_CODES = {
    "once": "o",
    "republished": "r",
    "more_than_once": "d",
    "failed": "f",
    "missing": "m",
    "missed": "s",
    "catchup_limit": "c",
    "other_skip": "x",
}


@dataclass(frozen=True)
class Arrival:
    """One message as it reached the broker queue, stamped by the collector's clock."""

    at: float  # seconds since the epoch (this host's clock; replicas' clocks may be skewed)
    entry: str
    window: datetime | None  # the `safebeat_window` header; None for stock beat
    task_id: str
    args: str  # the message's `argsrepr`
    origin: str = ""  # the sending process, `gen<pid>@<host>`
    #: Found on the broker at the end only (the collector's reply was lost in a broker
    #: crash): it did arrive, but `at` is not when.
    recovered: bool = False


def parse_message(raw: bytes, at: float) -> Arrival:
    """Read one kombu message body as stored in a Redis list."""
    headers: dict[str, Any] = json.loads(raw)["headers"]
    window = headers.get("safebeat_window")
    entry = headers.get("safebeat_entry") or str(headers["task"]).removeprefix("chaos.")
    return Arrival(
        at=at,
        entry=entry,
        window=parse_window(window) if window else None,
        task_id=str(headers["id"]),
        args=str(headers.get("argsrepr", "")),
        origin=str(headers.get("origin", "")),
    )


@dataclass
class Tally:
    """What happened to every window of one side of one run."""

    expected: int = 0
    once: int = 0
    taken_over: int = 0
    republished: int = 0
    more_than_once: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    failed: int = 0
    missing: list[tuple[str, str]] = field(default_factory=list)
    unexpected: list[tuple[str, str]] = field(default_factory=list)
    contradictions: list[tuple[str, str]] = field(default_factory=list)
    messages: int = 0
    max_lag: float | None = None
    #: The lag split by whether the window waited for a take-over (its row records
    #: `attempts > 1`) or went out from its first claim.
    max_lag_taken_over: float | None = None
    max_lag_first_claim: float | None = None
    #: Windows taken over, per entry, and the most attempts any window's row records.
    taken_over_by_entry: Counter[str] = field(default_factory=Counter)
    most_attempts: int = 0
    failover_gap: float | None = None
    #: Stock beat only: whether the numbers come from arrival times (no window identity).
    estimated: bool = False
    #: Per entry, one `OUTCOME_CODES` letter per window, oldest first.
    outcomes: dict[str, str] = field(default_factory=dict)

    @property
    def problems(self) -> int:
        """Windows sent twice, lost without a reason, or sent although they should not be."""
        return (
            self.more_than_once
            + len(self.missing)
            + len(self.unexpected)
            + len(self.contradictions)
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "expected": self.expected,
            "dispatched_once": self.once,
            "taken_over_after_claim_timeout": self.taken_over,
            "republished_same_task_id": self.republished,
            "dispatched_more_than_once": self.more_than_once,
            "skipped_by_policy": dict(sorted(self.skipped.items())),
            "failed_recorded": self.failed,
            "missing_without_reason": len(self.missing),
            "missing_windows": [f"{entry}@{window}" for entry, window in self.missing[:50]],
            "unexpected_messages": [f"{e}@{w}" for e, w in self.unexpected[:50]],
            "contradictions": [f"{e}@{w}" for e, w in self.contradictions[:50]],
            "messages": self.messages,
            "max_lag_s": _rounded(self.max_lag),
            "max_lag_taken_over_s": _rounded(self.max_lag_taken_over),
            "max_lag_first_claim_s": _rounded(self.max_lag_first_claim),
            "taken_over_by_entry": dict(sorted(self.taken_over_by_entry.items())),
            "most_attempts": self.most_attempts,
            "failover_gap_s": _rounded(self.failover_gap),
            "estimated_from_arrivals": self.estimated,
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


def grid(state: EntryState, rule: timedelta | CronSlots, until: datetime) -> list[datetime]:
    """The windows of an entry (interval or crontab) after its definition, up to `until`."""
    if isinstance(rule, CronSlots):
        return rule.windows(state.defined_at, until)
    first = state.anchor + ((state.defined_at - state.anchor) // rule + 1) * rule
    count = max(0, (until - first) // rule + 1)
    return [first + k * rule for k in range(count)]


def _on_grid(state: EntryState, rule: timedelta | CronSlots, window: datetime) -> bool:
    if window <= state.defined_at:
        return False
    if isinstance(rule, CronSlots):
        return rule.is_window(window)
    return (window - state.anchor) % rule == timedelta(0)


def _rule(spec: Rule) -> timedelta | CronSlots:
    return spec if isinstance(spec, CronSlots) else timedelta(seconds=spec)


def count_safebeat(
    schedule: Mapping[str, Rule],
    states: Mapping[str, EntryState],
    rows: Iterable[DispatchRecord],
    arrivals: Sequence[Arrival],
    *,
    horizon: datetime,
) -> Tally:
    """Classify every window of every entry up to `horizon` (see the module docstring)."""
    tally = Tally(messages=len(arrivals))
    copies: dict[tuple[str, datetime], list[Arrival]] = defaultdict(list)
    for arrival in arrivals:
        if arrival.window is None:
            tally.unexpected.append((arrival.entry, "no safebeat_window header"))
            continue
        copies[(arrival.entry, arrival.window)].append(arrival)
    by_key: dict[tuple[str, datetime], DispatchRecord] = {}
    skips: dict[str, list[DispatchRecord]] = defaultdict(list)
    for record in rows:
        if record.status is Status.SKIPPED:
            skips[record.entry].append(record)
        else:
            by_key[(record.entry, record.window)] = record
    lags: dict[bool, list[float]] = {True: [], False: []}  # taken over -> lags
    for name, spec in schedule.items():
        state = states.get(name)
        if state is None:
            continue
        outcomes: list[str] = []
        for window in grid(state, _rule(spec), horizon):
            tally.expected += 1
            outcome = _classify(tally, name, window, copies, skips[name], by_key, lags)
            outcomes.append(OUTCOME_CODES[outcome])
        tally.outcomes[name] = "".join(outcomes)
    for key, sent in copies.items():
        name, window = key
        state = states.get(name)
        if (
            name not in schedule
            or state is None
            or not _on_grid(state, _rule(schedule[name]), window)
        ):
            tally.unexpected.extend((name, window.isoformat()) for _ in sent)
        elif window > horizon and len(sent) > 1 and not _republished(sent, by_key.get(key)):
            tally.more_than_once += 1  # a late window sent twice still counts
    tally.max_lag_taken_over = max(lags[True], default=None)
    tally.max_lag_first_claim = max(lags[False], default=None)
    tally.max_lag = max(lags[True] + lags[False], default=None)
    return tally


def _classify(  # noqa: PLR0917 - the tally's working state, in one place
    tally: Tally,
    name: str,
    window: datetime,
    copies: Mapping[tuple[str, datetime], list[Arrival]],
    skips: Sequence[DispatchRecord],
    by_key: Mapping[tuple[str, datetime], DispatchRecord],
    lags: dict[bool, list[float]],
) -> str:
    """Count one window in `tally`; return its outcome (a key of `OUTCOME_CODES`)."""
    sent = copies.get((name, window), [])
    reason = _skip_reason(skips, window)
    row = by_key.get((name, window))
    taken_over = row is not None and row.attempts > 1
    if row is not None:
        tally.most_attempts = max(tally.most_attempts, row.attempts)
    if taken_over:
        tally.taken_over += 1
        tally.taken_over_by_entry[name] += 1
    if sent:
        if reason is not None:
            tally.contradictions.append((name, window.isoformat()))
        timed = [a.at for a in sent if not a.recovered]
        if timed:
            lags[taken_over].append(min(timed) - window.timestamp())
        if len(sent) == 1:
            tally.once += 1
            return "once"
        if _republished(sent, row):
            tally.republished += 1
            return "republished"
        tally.more_than_once += 1
        return "more_than_once"
    if reason is not None:
        tally.skipped[reason] += 1
        return reason if reason in OUTCOME_CODES else "other_skip"
    if row is not None and row.status is Status.FAILED:
        tally.failed += 1
        return "failed"
    tally.missing.append((name, window.isoformat()))
    return "missing"


def _republished(sent: Sequence[Arrival], row: DispatchRecord | None) -> bool:
    """Copies of one window explained by a recorded take-over: one task id, attempts > 1."""
    return len({a.task_id for a in sent}) == 1 and row is not None and row.attempts > 1


def _skip_reason(rows: Sequence[DispatchRecord], window: datetime) -> str | None:
    """The reason of a recorded skipped span `[skipped_from, window]` holding `window`."""
    for row in rows:
        first = row.skipped_from or row.window
        if first <= window <= row.window:
            return row.reason or "unknown"
    return None


def count_stock(
    schedule: Mapping[str, float],
    arrivals: Sequence[Arrival],
    *,
    start: float,
    horizon: float,
) -> Tally:
    """Count stock beat's messages against the same windows (see the module docstring)."""
    tally = Tally(estimated=True)
    by_entry: dict[str, list[float]] = defaultdict(list)
    late: Counter[str] = Counter()
    for arrival in arrivals:
        if arrival.recovered:
            late[arrival.entry] += 1
            tally.messages += 1
        elif start < arrival.at <= horizon:
            by_entry[arrival.entry].append(arrival.at)
            tally.messages += 1
    for name, every in schedule.items():
        windows = math.floor(horizon / every) - math.floor(start / every)
        times = sorted(by_entry.get(name, []))
        marks = [start, *times, horizon]
        lost = sum(max(0, round((b - a) / every) - 1) for a, b in itertools.pairwise(marks))
        lost = min(lost, windows)
        sent_windows = windows - lost
        extra = max(0, len(times) + late[name] - sent_windows)
        twice = min(sent_windows, extra)
        tally.expected += windows
        tally.once += sent_windows - twice
        tally.more_than_once += twice
        tally.missing.extend((name, f"~{k}") for k in range(lost))
    return tally


def failover_gap(arrivals: Iterable[Arrival], *, after: float, until: float) -> float:
    """The longest time without any message arriving, from `after` to `until`."""
    times = sorted(a.at for a in arrivals if after <= a.at <= until and not a.recovered)
    marks = [after, *times, until]
    return max(b - a for a, b in itertools.pairwise(marks))


def utc(seconds: float) -> datetime:
    """An instant of this host's clock as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, timezone.utc)


#: What each missed-window policy leaves in an entry's `Tally.outcomes` after one long
#: outage: `latest`, the windows before it dispatched, the backlog skipped as `missed` but
#: for its newest (the one catch-up), then every live window; `all` within its limit,
#: every window; `all` past its limit (100), the oldest of the backlog skipped as
#: `catchup_limit` and at least the newest 100 dispatched.
AFTER_OUTAGE = {
    "latest": re.compile(r"[or]*s+[or]+"),
    "all": re.compile(r"[or]+"),
    "all, limit 100": re.compile(r"[or]*c+[or]{100,}"),
}


def after_outage(tally: Tally, groups: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Per policy group (`AFTER_OUTAGE`; `groups` maps entry -> group): how many entries,
    how many of them show the group's pattern, windows dispatched, windows skipped."""
    summary: dict[str, dict[str, int]] = {}
    for name, group in groups.items():
        outcomes = tally.outcomes.get(name, "")
        counts = summary.setdefault(
            group, {"entries": 0, "as_expected": 0, "dispatched": 0, "skipped": 0}
        )
        counts["entries"] += 1
        counts["as_expected"] += bool(AFTER_OUTAGE[group].fullmatch(outcomes))
        counts["dispatched"] += outcomes.count("o") + outcomes.count("r")
        counts["skipped"] += sum(outcomes.count(code) for code in "scx")
    return summary


def recovery(
    arrivals: Sequence[Arrival],
    tally: Tally,
    *,
    restart: float,
    groups: Mapping[str, str],
    interval: Collection[str],
) -> dict[str, Any]:
    """How a side came back after every replica was restarted at `restart`.

    Seconds from the restart to the first message, to the first live window's message (a
    window after the restart), and to the last catch-up message (a window before it); the
    worst lag of the `interval` entries' live windows after that first one (do live
    windows wait for the catch-up?) and of the crontab entries' (`groups`: entry ->
    policy group) live windows; and what each policy group did (`after_outage`).
    """
    after = [a for a in arrivals if a.at > restart and not a.recovered and a.window]
    live = [a for a in after if a.window and a.window.timestamp() > restart]
    catch_up = [a for a in after if a.window and a.window.timestamp() <= restart]
    first_live = min((a.at for a in live), default=None)

    def lag(arrival: Arrival) -> float:
        assert arrival.window is not None  # `after` has windows only
        return arrival.at - arrival.window.timestamp()

    def worst(lags: list[float]) -> float | None:
        return round(max(lags), 2) if lags else None

    def since_restart(instant: float | None) -> float | None:
        return None if instant is None else round(instant - restart, 2)

    crontab_live = [a for a in live if a.entry in groups]
    interval_live = [
        a
        for a in live
        if a.entry in interval and first_live is not None and a.at - lag(a) > first_live
    ]
    return {
        "first_message_s": since_restart(min((a.at for a in after), default=None)),
        "first_live_dispatch_s": since_restart(first_live),
        "last_catch_up_message_s": since_restart(max((a.at for a in catch_up), default=None)),
        "catch_up_messages": len(catch_up),
        "interval_live_max_lag_s": worst([lag(a) for a in interval_live]),
        "live_crontab_messages": len(crontab_live),
        "crontab_live_max_lag_s": worst([lag(a) for a in crontab_live]),
        "policies": after_outage(tally, groups),
    }
