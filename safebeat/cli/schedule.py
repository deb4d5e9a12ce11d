"""`safebeat schedule add|list|remove`: entries added at run time, from the command line.

    safebeat -A proj schedule add report-42 proj.tasks.report --crontab "0 9 * * 1-5" \
        --timezone Europe/Berlin --kwargs '{"tenant": 42}'
    safebeat -A proj schedule list
    safebeat -A proj schedule remove report-42

The same operations as `safebeat.schedules` (see docs/schedules.md), on the store and
namespace the other commands use. `add` needs the app (-A): it refuses a name the app's
`beat_schedule` defines and checks the entry as beat will compile it.
"""

from __future__ import annotations

import json
from typing import Any

import click

from safebeat import schedules
from safebeat.cli.context import Options
from safebeat.cli.errors import UsageProblem
from safebeat.cli.options import opened, require_app, store_options
from safebeat.cli.output import emit_json, table
from safebeat.entries.runtime_definitions import describe_spec, encode
from safebeat.errors import shorten
from safebeat.limits import MAX_DEPTH, check_name


@click.group("schedule")
def schedule() -> None:
    """Add, list and remove entries added at run time (beside the app's beat_schedule)."""


def _json_option(value: str | None, option: str, kind: type) -> Any:
    if value is None:
        return kind()
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise UsageProblem(f"{option} {shorten(value)} is not JSON: {exc}") from exc
    except RecursionError:  # nested thousands deep: deeper than any entry may be
        raise UsageProblem(
            f"{option} {shorten(value)} nests lists and objects more than {MAX_DEPTH} deep "
            "(limits: docs/limits.md)"
        ) from None
    if not isinstance(parsed, kind):
        raise UsageProblem(f"{option} must be a JSON {kind.__name__}, got {shorten(value)}")
    return parsed


@schedule.command("add")
@click.argument("name")
@click.argument("task")
@click.option("--every", metavar="DURATION", help='An interval: "30s", "5m", "2h" or seconds.')
@click.option(
    "--crontab", "cron", metavar="FIELDS", help='5 cron fields ("0 9 * * 1-5"), or 6 with seconds.'
)
@click.option("--at", metavar="ISO", help="One window at this instant (ISO 8601, with offset).")
@click.option("--timezone", metavar="ZONE", help="The crontab's time zone (IANA name).")
@click.option("--args", "args_json", metavar="JSON", help="Positional arguments, a JSON list.")
@click.option("--kwargs", "kwargs_json", metavar="JSON", help="Keyword arguments, a JSON object.")
@click.option(
    "--options", "options_json", metavar="JSON", help='Send options, a JSON object ("queue", ...).'
)
@click.option("--replace", is_flag=True, help="Replace an entry added before (else refused).")
@store_options
@click.pass_obj
def add(
    options: Options,
    *,
    name: str,
    task: str,
    every: str | None,
    cron: str | None,
    at: str | None,
    timezone: str | None,
    args_json: str | None,
    kwargs_json: str | None,
    options_json: str | None,
    replace: bool,
) -> None:
    """Add entry NAME sending TASK on a schedule: --every, --crontab or --at (one of them).

    Every replica of `celery beat -S safebeat.Scheduler` runs it within about a second.
    """
    require_app(options, "schedule add", "checks the name against the app's beat_schedule")
    given = [value for value in (every, cron, at) if value is not None]
    if len(given) != 1:
        raise UsageProblem("give exactly one of --every, --crontab and --at")
    send_options = _json_option(options_json, "--options", dict)
    if timezone is not None:
        send_options.setdefault("safebeat", {})["timezone"] = timezone
    spec = encode(
        name,
        task,
        _schedule(every, cron, at),
        args=_json_option(args_json, "--args", list),
        kwargs=_json_option(kwargs_json, "--kwargs", dict),
        options=send_options,
    )
    with opened(options, create=True) as (config, store):
        if config.auto_migrate:
            store.migrate()
        stored = schedules.save(options.app, config, store, name, spec, replace=replace)
    click.echo(
        f"{'replaced' if replace else 'added'} {name!r} ({stored.entry.schedule_text}) in "
        f"namespace {config.namespace!r}; running replicas pick it up within about a second"
    )


def _schedule(every: str | None, cron: str | None, at: str | None) -> object:
    if every is not None:
        return every
    if cron is not None:
        if len(cron.split()) not in {5, 6}:
            raise UsageProblem(f"--crontab {cron!r}: expected 5 cron fields, or 6 with seconds")
        return cron
    assert at is not None  # noqa: S101 - exactly one was given
    from datetime import datetime  # noqa: PLC0415

    try:
        return datetime.fromisoformat(at)
    except ValueError as exc:
        raise UsageProblem(f"--at {at!r}: expected an ISO 8601 instant ({exc})") from exc


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@store_options
@click.pass_obj
def list_command(options: Options, as_json: bool) -> None:
    """List the entries added at run time in the namespace."""
    with opened(options) as (config, store):
        specs = store.runtime_entries(config.namespace)
    if as_json:
        emit_json([{"name": n, **json.loads(s)} for n, s in sorted(specs.items())])
        return
    if not specs:
        click.echo(f"no entries added at run time in namespace {config.namespace!r}")
        return
    rows = [
        [name, json.loads(text).get("task", "?"), describe_spec(text)]
        for name, text in sorted(specs.items())
    ]
    click.echo(table(["entry", "task", "schedule"], rows))


@schedule.command("remove")
@click.argument("name")
@store_options
@click.pass_obj
def remove(options: Options, name: str) -> None:
    """Remove entry NAME, added at run time; its history stays."""
    check_name(name)
    with opened(options) as (config, store):
        removed = store.delete_runtime_entry(config.namespace, name)
    if not removed:
        raise click.ClickException(
            f"no entry {name!r} was added at run time in namespace {config.namespace!r} "
            "(see `safebeat schedule list`)"
        )
    click.echo(
        f"removed {name!r} from namespace {config.namespace!r}; running replicas stop "
        "sending it within about a second"
    )
