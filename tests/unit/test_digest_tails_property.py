"""Entries compiled together share the text of their digests but for the args; every
digest must still be `entry_digest` of the entry's payload made alone (a mismatch would
register entries again on each restart, or have an old and a new replica disagree)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from celery.schedules import crontab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safebeat.config import Config
from safebeat.entries import compile_schedule
from safebeat.entries.compiling import described_entry
from safebeat.entries.digest import entry_digest
from safebeat.windows import Misfire, Overlap

UTC = timezone.utc
SHARED_CRONTAB = crontab(minute="*/5")
SCHEDULES = [10, 10.0, timedelta(seconds=10), 3600, SHARED_CRONTAB, crontab(minute="*/5")]
KEYS = st.one_of(st.text(max_size=3), st.integers(-3, 3), st.booleans(), st.none())
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.just(datetime(2026, 1, 2, tzinfo=UTC)),
    st.just(timedelta(seconds=3)),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(KEYS, inner, max_size=3),
    ),
    max_leaves=8,
)
ARGS = st.one_of(
    st.none(), st.just(()), st.just([]), st.lists(VALUES, max_size=3), st.tuples(VALUES)
)
EMPTY = st.sampled_from([None, {}, [], 0, ""])
SAFEBEAT = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {},
        optional={
            "overlap": st.sampled_from(["forbid", "allow"]),
            "misfire": st.sampled_from(["skip", "latest", "all"]),
            "pause_after_failures": st.integers(1, 3),
            "catchup_limit": st.integers(1, 3),
            "grace": st.sampled_from([30, "5m", None]),
            "timezone": st.sampled_from(["Europe/Paris", "UTC", "America/New_York"]),
            "exclude": st.sampled_from([["2026-12-25"], ["--01-01", "2026-05-01/2026-05-03"]]),
            "start": st.just("2026-01-01T00:00:00+00:00"),
            "jitter": st.sampled_from([5, "1m"]),
        },
    ),
)


@st.composite
def raw_entries(draw: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "task": draw(st.sampled_from(["t", "u"])),
        "schedule": draw(st.sampled_from(SCHEDULES)),
    }
    args = draw(ARGS)
    if args is not None or draw(st.booleans()):
        raw["args"] = args
    kwargs = draw(st.one_of(EMPTY, st.dictionaries(st.text(max_size=2), VALUES, max_size=2)))
    if kwargs is not None or draw(st.booleans()):
        raw["kwargs"] = kwargs
    safebeat = draw(SAFEBEAT)
    options = draw(st.sampled_from([None, {}, "safebeat", "queue"]))
    if options == "safebeat":
        raw["options"] = {"safebeat": safebeat}
    elif options == "queue":
        raw["options"] = {"queue": "q", "safebeat": safebeat}
    elif options is not None or draw(st.booleans()):
        raw["options"] = options
    relative = draw(st.sampled_from([None, False, True, "absent"]))
    if relative != "absent" and not isinstance(raw["schedule"], crontab):
        raw["relative"] = relative
    return raw


CONFIGS = [
    Config(namespace="proj"),
    Config(
        namespace="proj",
        misfire=Misfire.SKIP,
        grace=timedelta(seconds=30),
        catchup_limit=7,
        overlap=Overlap.FORBID,
        pause_after_failures=2,
    ),
]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(raw_entries(), min_size=1, max_size=8),
    st.sampled_from(CONFIGS),
    st.sampled_from([UTC, timezone(timedelta(hours=5))]),
)
def test_every_digest_is_its_payloads_alone(
    raws: list[dict[str, Any]], config: Config, zone: Any
) -> None:
    schedule = {f"e{index}": raw for index, raw in enumerate(raws)}
    entries, errors = compile_schedule(schedule, app_timezone=zone, config=config)
    for name, raw in schedule.items():
        try:
            _, described = described_entry(name, raw, app_timezone=zone, config=config)
        except Exception:  # noqa: BLE001 - refused alone: refused together too
            assert name in errors
            continue
        assert name in entries, errors.get(name)
        assert entries[name].digest == entry_digest(described())
