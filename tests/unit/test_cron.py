"""`safebeat.runners.cron`: cron text, and the window one `safebeat exec` start belongs to, on a
controlled clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from safebeat.runners.cron import (
    CronError,
    NoWindow,
    find_window,
    job_name_time,
    parse_schedule,
    parse_scheduled_time,
)

UTC = timezone.utc
GRACE = timedelta(minutes=10)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_five_fields_compile_to_the_crontab_beat_would_use() -> None:
    """'0 3 * * 1-5' in a zone is Celery's crontab: minute 0, hour 3, Monday to Friday."""
    rule = parse_schedule("0 3 * * 1-5", "Europe/Moscow")
    assert rule.minutes == (0,)
    assert rule.hours == (3,)
    assert rule.days_of_week == frozenset({1, 2, 3, 4, 5})
    assert rule.days_of_month == frozenset(range(1, 32))
    assert rule.tz == ZoneInfo("Europe/Moscow")


def test_macros_and_question_marks_read_as_cron_does() -> None:
    """@daily is '0 0 * * *', @hourly '0 * * * *', and '?' reads as '*' (as Kubernetes does)."""
    assert parse_schedule("@daily", "UTC") == parse_schedule("0 0 * * *", "UTC")
    assert parse_schedule("@hourly", "UTC") == parse_schedule("0 * * * *", "UTC")
    assert parse_schedule("0 3 ? * 1", "UTC") == parse_schedule("0 3 * * 1", "UTC")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0 3 * *", "has 4 field(s); expected 5"),
        ("61 3 * * *", "minute field '61'"),
        ("0 3 * * 7", "Sunday is 0 or sun"),
        ("0 3 1 * 1", "restricts both day-of-month (1) and day-of-week (1)"),
        ("@reboot", "unknown macro"),
    ],
)
def test_bad_cron_text_is_refused_naming_the_field(text: str, says: str) -> None:
    """Wrong field counts, out-of-range values, 7 for Sunday, OR-ed days and @reboot are named."""
    with pytest.raises(CronError, match="schedule") as caught:
        parse_schedule(text, "UTC")
    assert says in str(caught.value)


def test_an_unknown_time_zone_is_named() -> None:
    """--tz Mars/Base is refused with the zone's name and what to use instead."""
    with pytest.raises(CronError, match=r"--tz 'Mars/Base': unknown time zone 'Mars/Base'"):
        parse_schedule("0 3 * * *", "Mars/Base")


def test_the_window_is_the_latest_slot_within_the_grace() -> None:
    """Started at 03:04 for '0 3 * * *', the window is 03:00 (in the schedule's zone)."""
    rule = parse_schedule("0 3 * * *", "Europe/Moscow")  # 03:00 MSK = 00:00 UTC
    found = find_window(rule, now=at("2026-03-02T00:04:00"), grace=GRACE)
    assert found.window == at("2026-03-02T00:00:00")
    assert found.source == "the latest slot"


def test_a_start_later_than_the_grace_has_no_window() -> None:
    """Started 11 minutes after the slot with a 10-minute grace: refused, saying how late."""
    rule = parse_schedule("0 3 * * *", "UTC")
    with pytest.raises(NoWindow, match=r"was 0:11:00 ago, more than --grace 0:10:00"):
        find_window(rule, now=at("2026-03-02T03:11:00"), grace=GRACE)


def test_a_slot_in_the_spring_gap_fires_at_the_first_instant_after_it() -> None:
    """'30 2 * * *' in Berlin on the spring-forward night: the window is 03:00 CEST (01:00 UTC)."""
    rule = parse_schedule("30 2 * * *", "Europe/Berlin")
    found = find_window(rule, now=at("2026-03-29T01:05:00"), grace=GRACE)
    assert found.window == at("2026-03-29T01:00:00")


def test_a_slot_in_the_repeated_autumn_hour_is_one_window() -> None:
    """'30 2 * * *' in Berlin on the fall-back night: one window, at the first 02:30 (CEST);
    a start at the second 02:30 (CET) finds no window within the grace."""
    rule = parse_schedule("30 2 * * *", "Europe/Berlin")
    first = find_window(rule, now=at("2026-10-25T00:31:00"), grace=GRACE)
    assert first.window == at("2026-10-25T00:30:00")
    with pytest.raises(NoWindow):
        find_window(rule, now=at("2026-10-25T01:31:00"), grace=GRACE)


def test_the_cronjob_annotation_names_the_window_in_any_offset() -> None:
    """The annotation in the CronJob's zone (+03:00) and in UTC (Z) name one instant."""
    assert parse_scheduled_time("2026-03-02T03:00:00+03:00") == at("2026-03-02T00:00:00")
    assert parse_scheduled_time("2026-03-02T00:00:00Z") == at("2026-03-02T00:00:00")
    with pytest.raises(CronError, match="has no offset"):
        parse_scheduled_time("2026-03-02T03:00:00")
    with pytest.raises(CronError, match="not an RFC 3339 time"):
        parse_scheduled_time("yesterday")


def test_a_scheduled_time_wins_over_the_clock_even_when_the_pod_starts_late() -> None:
    """A pod started 8 minutes late by the annotation still runs its own window, not a newer one."""
    rule = parse_schedule("*/5 * * * *", "UTC")
    found = find_window(
        rule,
        now=at("2026-03-02T00:08:00"),
        grace=GRACE,
        scheduled_time="2026-03-02T00:00:00Z",
    )
    assert found.window == at("2026-03-02T00:00:00")
    assert found.source == "the scheduled time"


def test_a_scheduled_time_that_is_not_a_slot_is_refused() -> None:
    """An annotation at 04:00 for '0 3 * * *' means --schedule or --tz differ from the CronJob's."""
    rule = parse_schedule("0 3 * * *", "UTC")
    with pytest.raises(NoWindow, match="is not a slot of the schedule; do --schedule and --tz"):
        find_window(
            rule, now=at("2026-03-02T04:01:00"), grace=GRACE, scheduled_time="2026-03-02T04:00Z"
        )


def test_a_scheduled_time_far_ahead_of_the_clock_is_refused() -> None:
    """A window more than the grace ahead of this host's clock says the clock may be wrong."""
    rule = parse_schedule("0 3 * * *", "UTC")
    with pytest.raises(NoWindow, match="ahead of this host's clock"):
        find_window(
            rule, now=at("2026-03-02T02:00:00"), grace=GRACE, scheduled_time="2026-03-02T03:00Z"
        )


def test_the_job_name_gives_the_scheduled_minute() -> None:
    """A CronJob's Job `<name>-<minutes since 1970>` names its scheduled time; a hand-made
    Job name is refused."""
    minutes = int(at("2026-03-02T00:00:00").timestamp() // 60)
    assert job_name_time(f"charge-daily-{minutes}") == at("2026-03-02T00:00:00")
    with pytest.raises(CronError, match="does not end in the scheduled minute"):
        job_name_time("charge-daily-manual")


def test_the_job_name_and_the_annotation_must_agree() -> None:
    """Given both, a job name and an annotation naming different windows are refused."""
    rule = parse_schedule("0 * * * *", "UTC")
    minutes = int(at("2026-03-02T01:00:00").timestamp() // 60)
    found = find_window(
        rule,
        now=at("2026-03-02T01:00:30"),
        grace=GRACE,
        scheduled_time="2026-03-02T01:00:00Z",
        job_name=f"hourly-{minutes}",
    )
    assert found.window == at("2026-03-02T01:00:00")
    with pytest.raises(CronError, match="name different windows"):
        find_window(
            rule,
            now=at("2026-03-02T01:00:30"),
            grace=GRACE,
            scheduled_time="2026-03-02T00:00:00Z",
            job_name=f"hourly-{minutes}",
        )


def test_the_cronjob_in_the_docs_is_valid_and_matches_its_exec_arguments() -> None:
    """docs/cron.md's CronJob passes Kubernetes' strict schema, reads the Job name from the
    pod's label, and gives exec the CronJob's own schedule and zone."""
    import kubernetes_validate
    import yaml

    text = (Path(__file__).parents[2] / "docs" / "cron.md").read_text(encoding="utf-8")
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    cronjob = yaml.safe_load(block)
    kubernetes_validate.validate(cronjob, kubernetes_validate.latest_version(), strict=True)

    spec = cronjob["spec"]
    [container] = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    command = container["command"]
    assert command[:2] == ["safebeat", "exec"]
    assert f"--schedule={spec['schedule']}" in command
    assert f"--tz={spec['timeZone']}" in command
    parse_schedule(spec["schedule"], spec["timeZone"])
    env = {item["name"]: item for item in container["env"]}
    field = env["SAFEBEAT_JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert field == "metadata.labels['batch.kubernetes.io/job-name']"
