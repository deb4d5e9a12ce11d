"""Names and times given to `safebeat exec` (its cron runner) and to the APScheduler
executor are checked against what every store holds (docs/limits.md): a name or window no
store holds is refused with an error naming it, before anything is stored or run, and
never run untracked, even with fail-open."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from safebeat.cli import main
from safebeat.contrib.apscheduler import JobRefused, run_job
from safebeat.runners import cron
from safebeat.stores import open_store
from tests.integration.test_apscheduler import guard, kinds, make_job

#: Names no store holds: a lone surrogate (an argv byte that is not UTF-8 decodes to one),
#: a NUL, a line break, more than 255 UTF-8 bytes.
BAD_NAMES = ["a\udcffb", "a\x00b", "a\nb", "x" * 256, "é" * 128]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("fail_open", [False, True])
def test_exec_refuses_an_entry_name_no_store_holds_naming_the_option(
    sqlite_url: str, namespace: str, tmp_path: object, name: str, fail_open: bool
) -> None:
    """A usage error naming --entry and the limit; the command is not run, nothing is
    stored."""
    marker = f"{tmp_path}/ran"
    args = ["--url", sqlite_url, "--namespace", namespace, "exec", "--entry", name]
    args += ["--schedule", "* * * * *", *(["--fail-open"] if fail_open else [])]
    result = CliRunner().invoke(main, [*args, "--", "touch", marker])
    assert result.exit_code == 2, result.output
    assert "--entry" in result.output
    assert "limits" in result.output
    assert "unexpected" not in result.output
    assert not os.path.exists(marker)
    store = open_store(sqlite_url)
    store.migrate()
    assert store.states(namespace) == {}
    store.close()


@pytest.mark.parametrize(
    "job_name",
    ["report-999999999999", "report-" + "9" * 5000, "report-٢٩٠٠٠٠٠٠"],
)
def test_a_cronjob_name_whose_minute_no_store_holds_is_a_named_error(job_name: str) -> None:
    """The minute a Job's name ends in, outside the years every store holds (or not in
    ASCII digits), is a CronError naming the job name, never an OverflowError."""
    with pytest.raises(cron.CronError, match="job name"):
        cron.job_name_time(job_name)


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00Z"]
)
def test_a_scheduled_time_no_store_holds_is_a_named_error(text: str) -> None:
    """--scheduled-time at the ends of the datetime range: a CronError naming it."""
    with pytest.raises(cron.CronError, match="scheduled time"):
        cron.parse_scheduled_time(text)


@pytest.mark.parametrize("job_id", BAD_NAMES)
def test_an_apscheduler_job_id_no_store_holds_is_refused_even_fail_open(
    sqlite_url: str, namespace: str, caplog: pytest.LogCaptureFixture, job_id: str
) -> None:
    """The job is not run (EVENT_JOB_ERROR with JobRefused naming the job id and the
    limit), with fail_open too: the id is the job's fault, not the store's."""
    calls: list[int] = []
    job = make_job(lambda: calls.append(1), job_id=job_id)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    with caplog.at_level(logging.ERROR):
        events = run_job(guard(sqlite_url, namespace, fail_open=True), job, "default", [now], "t")
    assert len(kinds(events)) == 1
    assert isinstance(events[0].exception, JobRefused)
    assert "job id" in str(events[0].exception)
    assert calls == []
