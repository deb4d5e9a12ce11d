"""The chaos suite's counting, on made-up runs: it must see every kind of failure it reports."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone

from safebeat.identity import format_window
from safebeat.stores.protocols import DispatchRecord, EntryState, Status
from tests.chaos.counting import (
    Arrival,
    Tally,
    after_outage,
    count_safebeat,
    count_stock,
    failover_gap,
    grid,
    parse_message,
    recovery,
)
from tests.chaos.crontabs import CronSlots, crontab_entries, policy_group

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
SCHEDULE = {"every-1s": 1.0}
STATE = EntryState("every-1s", anchor=T0, defined_at=T0, last_window=None, digest="d", schedule="")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def message(window: float, *, task_id: str | None = None, delay: float = 0.1) -> Arrival:
    return Arrival(
        at=at(window).timestamp() + delay,
        entry="every-1s",
        window=at(window),
        task_id=task_id or f"id-{window}",
        args="[]",
    )


def row(window: float, status: Status = Status.SENT, **fields: object) -> DispatchRecord:
    values: dict[str, object] = {
        "id": int(window * 10),
        "entry": "every-1s",
        "window": at(window),
        "status": status,
        "task_id": f"id-{window}",
        "task_name": "t",
        "reason": None,
        "skipped_from": None,
        "skipped_count": None,
        "replica": "r",
        "host": "h",
        "pid": 1,
        "claimed_at": at(window),
        "sent_at": at(window),
        "attempts": 1,
        "error": None,
    }
    values.update(fields)
    return DispatchRecord(**values)  # type: ignore[arg-type]


def count(rows: list[DispatchRecord], arrivals: list[Arrival], horizon: float = 6) -> Tally:
    return count_safebeat(SCHEDULE, {"every-1s": STATE}, rows, arrivals, horizon=at(horizon))


def test_the_grid_starts_after_the_definition_and_ends_at_the_horizon() -> None:
    """Windows at or before `defined_at` are never expected; the horizon is included."""
    state = EntryState("e", anchor=T0, defined_at=at(2.5), last_window=None, digest="", schedule="")
    assert grid(state, timedelta(seconds=1), at(5)) == [at(3), at(4), at(5)]


def test_every_window_sent_once_is_counted_once_with_its_lag() -> None:
    """Six windows, each on the broker once: six dispatched once, nothing else, lag measured."""
    tally = count([row(w) for w in range(1, 7)], [message(w, delay=0.25) for w in range(1, 7)])
    assert (tally.expected, tally.once, tally.problems) == (6, 6, 0)
    assert tally.max_lag is not None
    assert abs(tally.max_lag - 0.25) < 1e-6


def test_a_copy_recovered_after_a_broker_crash_counts_but_does_not_set_the_lag() -> None:
    """A message found only at the end (its arrival time unknown) counts once, with no lag."""
    recovered = dataclasses.replace(message(3, delay=40), recovered=True)
    arrivals = [message(w) for w in (1, 2, 4, 5, 6)] + [recovered]
    tally = count([row(w) for w in range(1, 7)], arrivals)
    assert (tally.once, tally.problems) == (6, 0)
    assert tally.max_lag is not None
    assert tally.max_lag < 1


def test_a_second_copy_without_a_recorded_republish_is_a_duplicate() -> None:
    """Two copies of a window whose row says one attempt: dispatched more than once."""
    arrivals = [message(w) for w in range(1, 7)] + [message(3)]
    tally = count([row(w) for w in range(1, 7)], arrivals)
    assert tally.more_than_once == 1
    assert tally.problems == 1


def test_a_recorded_republish_with_the_same_task_id_is_not_a_duplicate() -> None:
    """Two copies, same task id, row attempts 2: re-published (at least once), not a duplicate."""
    rows = [row(w, attempts=2 if w == 3 else 1) for w in range(1, 7)]
    tally = count(rows, [message(w) for w in range(1, 7)] + [message(3)])
    assert (tally.republished, tally.taken_over, tally.more_than_once) == (1, 1, 0)
    assert tally.problems == 0


def test_a_claim_taken_over_and_sent_once_counts_once_and_as_taken_over() -> None:
    """A window whose row says two attempts but reached the broker once: once, taken over."""
    rows = [row(w, attempts=2 if w == 4 else 1) for w in range(1, 7)]
    tally = count(rows, [message(w) for w in range(1, 7)])
    assert (tally.once, tally.taken_over, tally.republished) == (6, 1, 0)


def test_the_lag_of_windows_taken_over_is_kept_apart_from_the_others() -> None:
    """Window 3 taken over 2.5 s late, window 5 taken over twice 4.5 s late, the rest 0.25 s
    late from their first claim: each lag where it belongs, the attempts and entries seen."""
    attempts = {3: 2, 5: 3}
    delays = {3: 2.5, 5: 4.5}
    rows = [row(w, attempts=attempts.get(w, 1)) for w in range(1, 7)]
    tally = count(rows, [message(w, delay=delays.get(w, 0.25)) for w in range(1, 7)])
    assert tally.max_lag_taken_over is not None
    assert tally.max_lag_first_claim is not None
    assert abs(tally.max_lag_taken_over - 4.5) < 1e-6
    assert abs(tally.max_lag_first_claim - 0.25) < 1e-6
    assert tally.max_lag == tally.max_lag_taken_over
    assert (tally.taken_over_by_entry, tally.most_attempts) == ({"every-1s": 2}, 3)


def test_without_a_take_over_no_lag_is_counted_as_taken_over() -> None:
    """Every window from its first claim: no taken-over lag, one attempt at most."""
    tally = count([row(w) for w in range(1, 7)], [message(w) for w in range(1, 7)])
    assert tally.max_lag_taken_over is None
    assert (tally.taken_over_by_entry, tally.most_attempts) == ({}, 1)


def test_a_copy_with_another_task_id_is_a_duplicate_even_after_a_republish() -> None:
    """A second copy of a window under a different task id is never explained by a re-publish."""
    rows = [row(w, attempts=2 if w == 3 else 1) for w in range(1, 7)]
    arrivals = [message(w) for w in range(1, 7)] + [message(3, task_id="other")]
    assert count(rows, arrivals).more_than_once == 1


def test_windows_in_a_recorded_skip_are_skipped_by_policy_and_others_are_missing() -> None:
    """Windows 2-3 inside a `missed` skip row are explained; window 5 with no trace is missing."""
    skip = row(3, Status.SKIPPED, reason="missed", skipped_from=at(2), skipped_count=2)
    sent = [1, 4, 6]
    tally = count([skip, *(row(w) for w in sent)], [message(w) for w in sent])
    assert tally.skipped == {"missed": 2}
    assert tally.missing == [("every-1s", at(5).isoformat())]
    assert tally.problems == 1


def test_a_window_sent_although_recorded_skipped_is_a_contradiction() -> None:
    """A message for a window inside a skipped span is reported, not counted as fine."""
    skip = row(2, Status.SKIPPED, reason="missed", skipped_from=at(2), skipped_count=1)
    tally = count([skip], [message(w) for w in range(1, 7)])
    assert tally.contradictions == [("every-1s", at(2).isoformat())]


def test_a_message_off_the_grid_or_before_the_definition_is_unexpected() -> None:
    """Messages for 3.5 s (no window) and 0 s (before the definition) are both unexpected."""
    arrivals = [message(w) for w in range(1, 7)] + [message(3.5), message(0)]
    tally = count([row(w) for w in range(1, 7)], arrivals)
    assert sorted(w for _, w in tally.unexpected) == [at(0).isoformat(), at(3.5).isoformat()]


def test_a_recorded_publish_failure_is_a_reason_not_a_loss() -> None:
    """A window whose row is `failed` with an error is counted as failed, not missing."""
    rows = [row(w) for w in (1, 2, 4, 5, 6)] + [row(3, Status.FAILED, error="boom")]
    tally = count(rows, [message(w) for w in (1, 2, 4, 5, 6)])
    assert (tally.failed, tally.missing) == (1, [])


def test_stock_copies_and_gaps_are_counted_from_arrival_times() -> None:
    """Three stock beats sending each second: copies; a 3 s silence: two windows sent by nobody."""
    start = at(0).timestamp()
    times = [start + s + d for s in (1, 2, 3, 6, 7, 8) for d in (0.1, 0.2, 0.3)]
    arrivals = [Arrival(t, "every-1s", None, f"id{t}", "[]") for t in times]
    tally = count_stock(SCHEDULE, arrivals, start=start, horizon=start + 8.5)
    assert tally.expected == 8
    assert len(tally.missing) == 2
    assert tally.more_than_once == 6
    assert tally.messages == 18


def test_the_failover_gap_is_the_longest_silence_after_the_fault() -> None:
    """Arrivals at 1, 2, 6 and 7 s after a fault at 0 s, until 8 s: the gap is 4 s."""
    start = at(0).timestamp()
    arrivals = [Arrival(start + s, "e", None, "i", "[]") for s in (1, 2, 6, 7)]
    assert failover_gap(arrivals, after=start, until=start + 8) == 4


def test_a_kombu_message_is_read_as_its_entry_window_and_task_id() -> None:
    """The headers beat puts on a message give the entry, the window, the id and the sender."""
    headers = {
        "id": "abc",
        "task": "chaos.every-1s",
        "safebeat_entry": "every-1s",
        "safebeat_window": format_window(at(3)),
        "argsrepr": "['v1']",
        "origin": "gen42@host",
    }
    arrival = parse_message(json.dumps({"headers": headers, "body": ""}).encode(), 1.0)
    assert (arrival.entry, arrival.window, arrival.task_id) == ("every-1s", at(3), "abc")
    assert (arrival.args, arrival.origin) == ("['v1']", "gen42@host")
    stock = parse_message(json.dumps({"headers": {"id": "x", "task": "chaos.e"}}).encode(), 1.0)
    assert (stock.entry, stock.window) == ("e", None)


KOLKATA_NO_NOON = CronSlots("Asia/Kolkata", frozenset(range(24)) - {12})


def cron_state(name: str, defined_at: datetime) -> EntryState:
    return EntryState(
        name, anchor=T0, defined_at=defined_at, last_window=None, digest="d", schedule=""
    )


def cron_message(name: str, window: datetime) -> Arrival:
    return Arrival(window.timestamp() + 0.2, name, window, f"{name}@{window}", "[]")


def cron_row(
    name: str, window: datetime, skipped_from: datetime | None = None, **fields: object
) -> DispatchRecord:
    """A `sent` row of entry `name`, or with `skipped_from` a `skipped` span up to `window`."""
    if skipped_from is None:
        record = row(0, Status.SENT, **fields)
    else:
        record = row(0, Status.SKIPPED, skipped_from=skipped_from, **fields)
    return dataclasses.replace(record, entry=name, window=window, task_id=f"{name}@{window}")


def test_crontab_windows_are_the_minutes_of_the_local_hours_in_the_entry_zone() -> None:
    """Noon in Kolkata (UTC+5:30) is 06:30-07:29 UTC: those minutes are no windows."""
    start = datetime(2026, 1, 1, 6, 0, tzinfo=timezone.utc)
    windows = KOLKATA_NO_NOON.windows(start, start + timedelta(hours=2))
    assert len(windows) == 120 - 60
    assert windows[28] == datetime(2026, 1, 1, 6, 29, tzinfo=timezone.utc)
    assert windows[29] == datetime(2026, 1, 1, 7, 30, tzinfo=timezone.utc)
    assert not KOLKATA_NO_NOON.is_window(datetime(2026, 1, 1, 7, 0, tzinfo=timezone.utc))
    assert not KOLKATA_NO_NOON.is_window(windows[0] + timedelta(seconds=30))
    state = cron_state("c", defined_at=start + timedelta(seconds=30))
    assert grid(state, KOLKATA_NO_NOON, start + timedelta(minutes=3))[0] == windows[0]


def test_a_crontab_message_off_its_slots_is_unexpected_and_a_missed_slot_is_missing() -> None:
    """A message at 07:00 UTC (noon in Kolkata, left out) is unexpected; 06:02 unsent is missing."""
    start = datetime(2026, 1, 1, 6, 0, tzinfo=timezone.utc)
    state = cron_state("c", defined_at=start)
    sent = [start + timedelta(minutes=m) for m in (1, 3)]
    off = datetime(2026, 1, 1, 7, 0, tzinfo=timezone.utc)
    tally = count_safebeat(
        {"c": KOLKATA_NO_NOON},
        {"c": state},
        [cron_row("c", w) for w in sent],
        [cron_message("c", w) for w in [*sent, off]],
        horizon=start + timedelta(minutes=3),
    )
    assert (tally.expected, tally.once, tally.outcomes["c"]) == (3, 2, "omo")
    assert tally.missing == [("c", (start + timedelta(minutes=2)).isoformat())]
    assert tally.unexpected == [("c", off.isoformat())]


def outage_outcomes(
    spans: list[tuple[int, int, str]],
) -> tuple[list[DispatchRecord], list[Arrival]]:
    """Rows and messages of entry "c" for windows 1..n minutes after T0: (first, last, what)
    with what "sent", "missed" or "catchup_limit" (one skipped span)."""
    rows: list[DispatchRecord] = []
    arrivals: list[Arrival] = []
    for first, last, what in spans:
        windows = [T0 + timedelta(minutes=m) for m in range(first, last + 1)]
        if what == "sent":
            rows += [cron_row("c", w) for w in windows]
            arrivals += [cron_message("c", w) for w in windows]
        else:
            rows.append(
                cron_row("c", windows[-1], windows[0], reason=what, skipped_count=len(windows))
            )
    return rows, arrivals


def outage_summary(spans: list[tuple[int, int, str]], group: str) -> dict[str, int]:
    rows, arrivals = outage_outcomes(spans)
    every_minute = CronSlots("UTC", frozenset(range(24)))
    tally = count_safebeat(
        {"c": every_minute},
        {"c": cron_state("c", T0)},
        rows,
        arrivals,
        horizon=T0 + timedelta(minutes=200),
    )
    return after_outage(tally, {"c": group})[group]


def test_after_an_outage_latest_is_one_catch_up_then_live_windows() -> None:
    """`latest`: sent, one missed span, then the catch-up and live windows; a second
    catch-up inside the backlog, or a live window skipped, breaks the pattern."""
    good = [(1, 2, "sent"), (3, 180, "missed"), (181, 200, "sent")]
    assert outage_summary(good, "latest") == {
        "entries": 1,
        "as_expected": 1,
        "dispatched": 22,
        "skipped": 178,
    }
    two_catch_ups = [
        (1, 2, "sent"),
        (3, 90, "missed"),
        (91, 91, "sent"),
        (92, 180, "missed"),
        (181, 200, "sent"),
    ]
    assert outage_summary(two_catch_ups, "latest")["as_expected"] == 0
    no_catch_up = [(1, 2, "sent"), (3, 200, "missed")]
    assert outage_summary(no_catch_up, "latest")["as_expected"] == 0


def test_after_an_outage_all_sends_every_window_or_the_newest_up_to_its_limit() -> None:
    """`all`: every window once; past its limit, a `catchup_limit` span then 100 or more sent."""
    assert outage_summary([(1, 200, "sent")], "all")["as_expected"] == 1
    assert (
        outage_summary([(1, 2, "sent"), (3, 80, "missed"), (81, 200, "sent")], "all")["as_expected"]
        == 0
    )
    limited = [(1, 2, "sent"), (3, 90, "catchup_limit"), (91, 200, "sent")]
    assert outage_summary(limited, "all, limit 100")["as_expected"] == 1
    too_few = [(1, 2, "sent"), (3, 150, "catchup_limit"), (151, 200, "sent")]
    assert outage_summary(too_few, "all, limit 100")["as_expected"] == 0


def test_the_lab_crontabs_mix_zones_hours_and_every_policy() -> None:
    """2,000 entries: several zones, some with hours left out, and all three policy groups."""
    entries = crontab_entries(2000)
    assert len(entries) == 2000
    assert len({spec["zone"] for spec in entries.values()}) >= 4
    restricted = [spec for spec in entries.values() if len(spec["hours"]) < 24]
    assert len(restricted) == 400
    assert {spec["zone"] for spec in restricted} == {"Asia/Kolkata", "Asia/Kathmandu"}
    for spec in restricted:  # moving the state 12 h back keeps every window on a slot
        left_out = set(range(24)) - set(spec["hours"])
        assert {(hour + 12) % 24 for hour in left_out} == left_out
    groups = [policy_group(spec) for spec in entries.values()]
    assert (groups.count("all"), groups.count("all, limit 100")) == (4, 4)


def test_recovery_times_the_first_live_window_and_the_catch_up_from_the_restart() -> None:
    """Restart at 100 s: a catch-up window (90 s) sent at 103 s, live windows 101-104 s
    sent from 103 s; the first live message, the last catch-up and the live lags."""
    restart = at(100).timestamp()

    def sent(entry: str, window: float, arrival: float) -> Arrival:
        return Arrival(at(arrival).timestamp(), entry, at(window), f"{entry}@{window}", "[]")

    arrivals = [
        sent("every-1s", 99, 99.1),  # before the restart: not counted
        sent("cron", 90, 103.0),  # the catch-up
        sent("every-1s", 101, 103.0),  # the first live window, 2 s late
        sent("every-1s", 104, 104.5),  # after the first live message: 0.5 s late
        sent("cron", 102, 104.0),  # a live crontab window, 2 s late
    ]
    tally = count_safebeat({"cron": CronSlots("UTC", frozenset(range(24)))}, {}, [], [], horizon=T0)
    found = recovery(arrivals, tally, restart=restart, groups={}, interval={"every-1s"})
    assert found["first_message_s"] == 3.0
    assert found["first_live_dispatch_s"] == 3.0
    assert found["last_catch_up_message_s"] == 3.0
    assert found["catch_up_messages"] == 1
    assert found["interval_live_max_lag_s"] == 0.5
    found = recovery(arrivals, tally, restart=restart, groups={"cron": "latest"}, interval=())
    assert (found["live_crontab_messages"], found["crontab_live_max_lag_s"]) == (1, 2.0)
