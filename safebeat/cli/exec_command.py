"""`safebeat exec`: run a command once per window, however many hosts or pods start it."""

from __future__ import annotations

import sys
from datetime import datetime, timezone

import click

from safebeat.cli.context import Options, open_store
from safebeat.cli.options import store_options
from safebeat.config import parse_duration
from safebeat.display import one_line
from safebeat.entries import describe
from safebeat.errors import SafebeatError
from safebeat.limits import check_name
from safebeat.runners import cron, execute


@click.command("exec", context_settings={"allow_interspersed_args": False})
@click.option("--entry", required=True, metavar="NAME", help="The entry's name in the store.")
@click.option(
    "--schedule",
    required=True,
    metavar="CRON",
    help='The schedule that starts the command: 5 cron fields ("0 3 * * *") or @daily, ...',
)
@click.option(
    "--tz", default="UTC", show_default=True, metavar="ZONE", help="Time zone of --schedule."
)
@click.option(
    "--grace",
    default="10m",
    show_default=True,
    metavar="DURATION",
    help="How late (or early) a window may start; a window outside it is not run.",
)
@click.option(
    "--scheduled-time",
    envvar="SAFEBEAT_SCHEDULED_TIME",
    metavar="RFC3339",
    help="The window, as a CronJob's batch.kubernetes.io/cronjob-scheduled-timestamp "
    "annotation gives it [env: SAFEBEAT_SCHEDULED_TIME].",
)
@click.option(
    "--job-name",
    envvar="SAFEBEAT_JOB_NAME",
    metavar="NAME",
    help="The name of the Job a CronJob created (<cronjob>-<minute>), which gives the "
    "window [env: SAFEBEAT_JOB_NAME].",
)
@click.option(
    "--fail-open",
    is_flag=True,
    help="Run the command, untracked, when the store cannot be reached (default: don't).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- COMMAND...")
@store_options
@click.pass_obj
def exec_command(
    options: Options,
    *,
    entry: str,
    schedule: str,
    tz: str,
    grace: str,
    scheduled_time: str | None,
    job_name: str | None,
    fail_open: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND once per window of --schedule, however many hosts or pods start it.

    For cron lines and Kubernetes CronJobs. The window is the scheduled time given
    (--scheduled-time or --job-name), else the latest slot of --schedule at or before
    this host's clock; either way at most --grace away. It is claimed in the store;
    where the claim is new the command runs with SAFEBEAT_ENTRY and SAFEBEAT_WINDOW set,
    signals are passed on to it, its start, end and outcome are recorded, and its exit
    status is returned. Where another host has the window: exit 0, nothing run.

    The command is never run without a claim (fail closed): no window within --grace,
    or an unreachable store, exits 125; a command that cannot be found 127, one that
    cannot be started 126. Put `--` before the command.
    """
    try:
        check_name(entry, "--entry")
        rule = cron.parse_schedule(schedule, tz)
        allowed = parse_duration(grace, "--grace")
    except SafebeatError as exc:
        raise click.BadParameter(str(exc)) from None
    request = execute.Request(
        entry=entry,
        rule=rule,
        schedule=f"exec {describe(rule)}",
        argv=command,
        grace=allowed,
        scheduled_time=scheduled_time or None,
        job_name=job_name or None,
        fail_open=fail_open,
    )
    try:
        config, store = open_store(options, create=True)
    except SafebeatError as exc:
        click.echo(f"Error: {one_line(str(exc))}; the command was not run", err=True)
        sys.exit(execute.EXIT_NOT_RUN)
    try:
        code = execute.run_once(
            request,
            config,
            store,
            now=datetime.now(timezone.utc),
            say=lambda message: click.echo(f"safebeat exec: {message}", err=True),
        )
    except execute.ExecError as exc:
        click.echo(f"Error: {exc}", err=True)
        code = exc.exit_code
    finally:
        store.close()
    sys.exit(code)
