"""Deterministic jitter: `options["safebeat"]["jitter"]` delays each window's send time.

The offset is a hash of (namespace, entry, window) mapped into [0, jitter): every replica
computes the same one, the window and its task id never move, only the send time does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab
from hypothesis import given, settings
from hypothesis import strategies as st

from safebeat import windows
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.errors import EntryError
from safebeat.identity import task_id_for
from safebeat.windows import Jitter, Misfire, Policy

UTC = timezone.utc
US = timedelta(microseconds=1)
START = datetime(2026, 3, 1, tzinfo=UTC)


def entry(
    jitter: object, schedule: object = None, *, name: str = "job", namespace: str = "ns"
) -> Entry:
    raw = {
        "task": "proj.tasks.job",
        "schedule": crontab(minute=0, hour=9) if schedule is None else schedule,
        "options": {"safebeat": {"jitter": jitter}},
    }
    config = Config(namespace=namespace)
    return compile_entry(name, raw, app_timezone=ZoneInfo("Europe/Berlin"), config=config)


def jitter_of(job: Entry) -> Jitter:
    assert job.policy.jitter is not None
    return job.policy.jitter


OFFSETS_IN_A_CHILD = """
import json, sys
from datetime import datetime, timedelta, timezone
from tests.unit.test_jitter import START, entry, jitter_of
jitter = jitter_of(entry("30s"))
windows = [START + timedelta(minutes=n) for n in range(50)]
print(json.dumps([jitter.offset(w) // timedelta(microseconds=1) for w in windows]))
"""


def test_every_replica_computes_the_same_offsets() -> None:
    """A separate process with another hash seed compiles the entry and gets the same offsets."""
    jitter = jitter_of(entry("30s"))
    here = [jitter.offset(START + timedelta(minutes=n)) // US for n in range(50)]
    child = subprocess.run(
        [sys.executable, "-c", OFFSETS_IN_A_CHILD],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert json.loads(child.stdout) == here
    assert len(set(here)) > 45, "offsets differ from window to window"


@settings(max_examples=300, deadline=None)
@given(
    spread=st.timedeltas(US, timedelta(hours=1)),
    window=st.datetimes(datetime(2000, 1, 1), datetime(2035, 1, 1)).map(
        lambda naive: naive.replace(tzinfo=UTC)
    ),
    key=st.text(max_size=30),
)
def test_an_offset_lies_within_zero_and_the_jitter(
    spread: timedelta, window: datetime, key: str
) -> None:
    """Every offset is in [0, jitter), whatever the entry, window and jitter."""
    offset = Jitter(spread, key).offset(window)
    assert timedelta(0) <= offset < spread


def test_offsets_are_spread_evenly_over_the_jitter() -> None:
    """10,000 minutely windows fill 20 equal bins evenly (chi-square below p = 0.001's 43.8)."""
    jitter = jitter_of(entry("30s"))
    bins = [0] * 20
    for n in range(10_000):
        offset = jitter.offset(START + timedelta(minutes=n))
        bins[int(offset / jitter.spread * 20)] += 1
    expected = 10_000 / 20
    chi_square = sum((count - expected) ** 2 / expected for count in bins)
    assert chi_square < 43.8, bins


def test_entries_and_namespaces_get_different_offsets_for_one_window() -> None:
    """500 tenants' 09:00 jobs do not all land in one second: the entry name is in the hash."""
    window = datetime(2026, 3, 2, 8, tzinfo=UTC)
    offsets = [jitter_of(entry("5m", name=f"tenant-{n}")).offset(window) for n in range(500)]
    per_second = Counter(offset // timedelta(seconds=1) for offset in offsets)
    # 500 over 300 seconds: about 1.7 a second; a uniform spread has no second above 10.
    assert len(per_second) > 200
    assert max(per_second.values()) <= 10
    other = jitter_of(entry("5m", name="tenant-0", namespace="other")).offset(window)
    assert other != jitter_of(entry("5m", name="tenant-0")).offset(window)


def test_a_window_is_sent_at_its_send_time_under_its_own_id() -> None:
    """Before window + offset nothing is due and the wake-up is that send time; at it, the
    window itself is dispatched, so its task id is the one it has without jitter."""
    job = entry("30m")
    window = datetime(2026, 3, 2, 8, tzinfo=UTC)  # 09:00 in Berlin
    send = jitter_of(job).send_time(window)
    assert window < send < window + timedelta(minutes=30)
    waiting = windows.due(job.rule, after=window - US, now=send - US, policy=job.policy)
    assert waiting.dispatch == ()
    assert waiting.skipped == ()
    assert waiting.last_window is None
    assert waiting.next_window == window
    assert waiting.wake_at == send
    sent = windows.due(job.rule, after=window - US, now=send, policy=job.policy)
    assert sent.dispatch == (window,)
    assert task_id_for("ns", "job", sent.dispatch[0]) == task_id_for("ns", "job", window)
    tomorrow = window + timedelta(days=1)
    assert sent.next_window == tomorrow
    assert sent.wake_at == jitter_of(job).send_time(tomorrow)


def test_without_jitter_the_wake_up_is_the_next_window() -> None:
    """An entry without jitter wakes up at its next window, as before."""
    job = compile_entry("job", {"task": "t", "schedule": 60}, app_timezone=UTC, config=Config())
    assert job.policy.jitter is None
    decision = windows.due(
        windows.IntervalRule(timedelta(minutes=1), START), after=START, now=START, policy=job.policy
    )
    assert decision.wake_at == decision.next_window == START + timedelta(minutes=1)


@st.composite
def ticking(draw: st.DrawFn) -> tuple[Policy, list[timedelta]]:
    misfire = draw(st.sampled_from([Misfire.LATEST, Misfire.ALL]))
    spread = draw(st.timedeltas(timedelta(seconds=1), timedelta(minutes=3)))
    gaps = draw(
        st.lists(st.timedeltas(timedelta(0), timedelta(minutes=2)), min_size=1, max_size=60)
    )
    return Policy(misfire, jitter=Jitter(spread, "ns/job")), gaps


@settings(max_examples=200, deadline=None)
@given(case=ticking())
def test_ticks_at_any_moments_decide_each_window_once_never_before_its_send_time(
    case: tuple[Policy, list[timedelta]],
) -> None:
    """Ticking at arbitrary moments, with a jitter longer or shorter than the minute between
    windows, each window is decided exactly once and none is sent before its send time."""
    policy, gaps = case
    assert policy.jitter is not None
    rule = windows.IntervalRule(timedelta(minutes=1), START)
    after = now = START
    decided: list[datetime] = []
    for gap in gaps:
        now += gap
        decision = windows.due(rule, after=after, now=now, policy=policy)
        for window in decision.dispatch:
            assert policy.jitter.send_time(window) <= now
        batch = list(decision.dispatch)
        for span in decision.skipped:
            batch += windows.windows_between(rule, span.first - US, span.last)
        decided += sorted(batch)
        after = decision.last_window or after
        assert decision.wake_at is None or decision.wake_at > now
    assert decided == sorted(set(decided))
    assert decided == list(windows.windows_between(rule, START, after))


@pytest.mark.parametrize(
    ("value", "problem"),
    [("2h", "at most 1h"), ("soon", "expected seconds"), (-5, "must not be negative")],
)
def test_a_bad_jitter_names_the_entry(value: object, problem: str) -> None:
    """A jitter that is not a duration of at most an hour is refused, naming the entry."""
    with pytest.raises(EntryError, match=problem) as caught:
        entry(value)
    assert "job" in str(caught.value)


def test_jitter_changes_the_digest_and_zero_is_no_jitter() -> None:
    """Setting jitter is a changed definition; `jitter: 0` is the same as none."""
    assert entry("30s").digest != entry(None).digest
    assert entry(0).digest == entry(None).digest
    assert entry(0).policy.jitter is None
