"""The `safebeat` command line (also `python -m safebeat`), configured like the scheduler.

safebeat -A proj status           # settings (and schedule) of the Celery app `proj`
safebeat --url postgresql://... history weekly-report
SAFEBEAT_URL=... safebeat health

Human tables by default, `--json` for scripts. Errors are one line and a non-zero exit;
store URLs are always shown without their password.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import click

from safebeat import cron, doctor, execute, operations
from safebeat import deploy_preview as planning
from safebeat.app_schedule import Schedule
from safebeat.cli_app import AppNotFound
from safebeat.cli_context import Options, choose_namespace, missing_store, open_store
from safebeat.config import Config, parse_duration
from safebeat.deploy_preview import RUN_OUTSIDE_CELERY, Change, Kind, describe_windows
from safebeat.display import BadInstant, note, one_line, parse_instant, span, unknown_entry, when
from safebeat.entries import Entry, describe
from safebeat.errors import ConfigError, SafebeatError
from safebeat.identity import format_window
from safebeat.overview import (
    EntryStatus,
    ReplicaStatus,
    empty_namespace,
    entry_statuses,
    replica_statuses,
)
from safebeat.records import AuditRecord, DispatchRecord
from safebeat.stores import Store, store_from_config
from safebeat.urls import redact

F = TypeVar("F", bound=Callable[..., Any])


class UsageProblem(click.ClickException):
    """A command given wrongly (a bad -A, a missing -A): one line and exit status 2."""

    exit_code = 2


def _debug(ctx: click.Context) -> bool:
    """Whether --traceback (of `safebeat` or `celery safebeat`) or SAFEBEAT_DEBUG asks for it."""
    asked = ctx
    while asked.parent is not None and "traceback" not in asked.params:
        asked = asked.parent
    return bool(asked.params.get("traceback")) or os.environ.get("SAFEBEAT_DEBUG", "") not in (
        "",
        "0",
    )


def invoke_with_one_line_errors(ctx: click.Context, invoke: Callable[[], Any]) -> Any:
    """Run `invoke` (a group's own invoke) so every error is one line, unless --traceback."""
    try:
        return invoke()
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except AppNotFound as exc:
        if _debug(ctx):
            raise
        problem = UsageProblem if exc.usage else click.ClickException
        raise problem(one_line(str(exc))) from exc
    except SafebeatError as exc:
        if _debug(ctx):
            raise
        raise click.ClickException(one_line(str(exc))) from exc
    except Exception as exc:
        if _debug(ctx):
            raise
        raise click.ClickException(
            f"unexpected {type(exc).__name__}: {one_line(str(exc))} (run again with "
            "--traceback, or SAFEBEAT_DEBUG=1, to see where it happened)"
        ) from exc


class _Main(click.Group):
    """The command group: every error is one line, unless --traceback asks for the trace."""

    def invoke(self, ctx: click.Context) -> Any:
        return invoke_with_one_line_errors(ctx, lambda: super(_Main, self).invoke(ctx))


def _set_option(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Record -A, --url or --namespace given after the command, as if given before it."""
    if value is None or param.name is None:
        return
    options = ctx.ensure_object(Options)
    if param.name == "app_name" and options.app_given_to_celery and value != options.app_name:
        raise UsageProblem(
            f"-A {value} after the command, but `celery -A {options.app_name}` already "
            f"named the app: give -A once, before `safebeat`, as for every celery command"
        )
    setattr(options, param.name, value)


def _store_options(command: F) -> F:
    """Accept -A, --url and --namespace after the command too (`safebeat status --url ...`)."""
    for option in reversed(
        [
            click.option(
                "-A",
                "--app",
                "app_name",
                metavar="APP",
                expose_value=False,
                callback=_set_option,
                help="As before the command: the Celery app.",
            ),
            click.option(
                "--url",
                metavar="URL",
                expose_value=False,
                callback=_set_option,
                help="As before the command: the store URL.",
            ),
            click.option(
                "--namespace",
                metavar="NAME",
                expose_value=False,
                callback=_set_option,
                help="As before the command: the namespace.",
            ),
        ]
    ):
        command = option(command)
    return command


def _say(message: str) -> None:
    click.echo(message, err=True)


@contextmanager
def _opened(options: Options, *, create: bool = False) -> Iterator[tuple[Config, Store]]:
    """The config (namespace chosen) and the store, closed after use.

    The store must exist unless `create`; see safebeat.cli_context.
    """
    config, store = open_store(options, create=create)
    try:
        yield choose_namespace(options, config, store, _say), store
    finally:
        store.close()


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_window(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if hasattr(value, "value") and isinstance(value.value, str):  # enums
        return value.value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(_jsonable(value), indent=2, sort_keys=True))


@click.group(cls=_Main)
@click.option("-A", "--app", "app_name", help="The Celery app whose settings to use (`celery -A`).")
@click.option("--url", help="Store URL; overrides safebeat_url and $SAFEBEAT_URL.", metavar="URL")
@click.option("--namespace", help="Namespace; overrides safebeat_namespace.", metavar="NAME")
@click.option(
    "--traceback",
    is_flag=True,
    help="Show the traceback of an unexpected error (also SAFEBEAT_DEBUG=1).",
)
@click.pass_context
def main(
    ctx: click.Context,
    app_name: str | None,
    url: str | None,
    namespace: str | None,
    traceback: bool,
) -> None:
    """Operate safebeat: inspect the store, check the setup, migrate and prune."""
    ctx.obj = Options(app_name, url, namespace)


@main.command()
@_store_options
@click.pass_obj
def migrate(options: Options) -> None:
    """Create or upgrade safebeat's tables in the store (safe to run from many places)."""
    config, store = open_store(options, create=True)
    try:
        version = operations.migrate(store, config.namespace, actor=operations.cli_actor())
    finally:
        store.close()
    click.echo(f"{store.display_url}: schema at version {version}")


def _status_row(s: EntryStatus) -> dict[str, Any]:
    return {
        "entry": s.name,
        "schedule": s.schedule,
        "next_window": s.next_window,
        "last_window": s.last_window,
        "last_sent_window": None if s.last_sent is None else s.last_sent.window,
        "sent_by": s.sent_by,
        "lag": s.lag,
        "last_outcome": s.last_outcome,
        "last_success": s.last_success,
        "running_since": s.running_since,
        "skipped_recently": s.skipped_recently,
        "paused": s.paused,
        "paused_until": s.paused_until,
        "pause_note": s.pause_note,
    }


def _replica_row(r: ReplicaStatus) -> dict[str, Any]:
    return {
        "replica": r.record.replica,
        "live": r.live,
        "version": r.record.version,
        "started_at": r.record.started_at,
        "heartbeat_at": r.record.heartbeat_at,
        "heartbeat_age": r.age,
        "entries": len(r.record.definitions),
    }


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@_store_options
@click.pass_obj
def status(options: Options, as_json: bool) -> None:
    """Every entry (next and last window, who sent it, lag, outcome) and the replicas."""
    with _opened(options) as (config, store):
        schedule = options.schedule(config, store)
        statuses = entry_statuses(
            store, config.namespace, None if schedule is None else schedule.entries
        )
        if not statuses:
            raise click.ClickException(empty_namespace(store, config.namespace))
        replicas = replica_statuses(store, config.namespace)
    broken = {} if schedule is None else schedule.broken
    if as_json:
        _emit_json(
            {
                "store": store.display_url,
                "namespace": config.namespace,
                "entries": [_status_row(s) for s in statuses],
                "broken": [{"entry": n, "problem": e.problem} for n, e in sorted(broken.items())],
                "replicas": [_replica_row(r) for r in replicas],
            }
        )
        return
    click.echo(f"store {store.display_url}, namespace {config.namespace!r}\n")
    click.echo(
        _table(
            ["entry", "schedule", "next window", "last sent", "sent by", "lag", "outcome",
             "last success", "running since"],
            [
                [
                    s.name + (f" ({s.pause_text})" if s.paused else ""),
                    s.schedule,
                    _next_cell(s, schedule),
                    when(None if s.last_sent is None else s.last_sent.window),
                    s.sent_by or "-",
                    span(s.lag),
                    "-" if s.last_outcome is None else s.last_outcome.value,
                    when(s.last_success),
                    when(s.running_since),
                ]
                for s in statuses
            ],
        )
    )  # fmt: skip
    if broken:
        click.echo("\nbroken entries (beat skips them):")
        for name, error in sorted(broken.items()):
            click.echo(f"  {name}: {error.problem}")
    click.echo("\nreplicas:")
    click.echo(
        _table(
            ["replica", "state", "version", "started", "heartbeat age"],
            [
                [
                    r.record.replica,
                    "live" if r.live else "dead",
                    r.record.version,
                    when(r.record.started_at),
                    span(r.age),
                ]
                for r in replicas
            ],
        )
    )


def _next_cell(s: EntryStatus, schedule: Schedule | None) -> str:
    if schedule is None and not s.schedule.startswith(RUN_OUTSIDE_CELERY):
        return "(needs -A)"
    if schedule is not None and s.name in schedule.broken:
        return "(broken)"
    return when(s.next_window)


def _history_row(r: DispatchRecord) -> dict[str, Any]:
    return {
        "window": r.window,
        "status": r.status,
        "reason": r.reason,
        "skipped_from": r.skipped_from,
        "skipped_count": r.skipped_count,
        "replica": r.replica,
        "claimed_at": r.claimed_at,
        "sent_at": r.sent_at,
        "lag": None if r.sent_at is None else r.sent_at - r.window,
        "attempts": r.attempts,
        "task_id": r.task_id,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "outcome": r.outcome,
        "runtime": r.runtime,
        "worker": r.worker,
        "duplicates": r.duplicates,
        "error": r.error,
    }


@main.command()
@click.argument("entry")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_store_options
@click.pass_obj
def history(options: Options, entry: str, limit: int, as_json: bool) -> None:
    """ENTRY's recent windows: who sent each, lag, outcome, and what was skipped and why."""
    with _opened(options) as (config, store):
        known = store.states(config.namespace)
        if not known:
            raise click.ClickException(empty_namespace(store, config.namespace))
        if entry not in known:
            raise click.ClickException(unknown_entry(entry, known, config.namespace))
        rows = store.history(config.namespace, entry, limit=limit)
    if as_json:
        _emit_json([_history_row(r) for r in rows])
        return
    click.echo(
        _table(
            ["window", "status", "replica", "lag", "attempts", "outcome", "runtime", "note"],
            [
                [
                    when(r.window),
                    r.status.value,
                    r.replica,
                    span(None if r.sent_at is None else r.sent_at - r.window),
                    str(r.attempts),
                    "-" if r.outcome is None else r.outcome.value,
                    span(r.runtime),
                    note(r),
                ]
                for r in rows
            ],
        )
    )


@main.command()
@click.option("--any", "any_replica", is_flag=True, help="Pass if any replica is alive.")
@click.option(
    "--max-age",
    default="30s",
    show_default=True,
    help="Oldest heartbeat that counts as alive (3 missed heartbeats by default).",
)
@_store_options
@click.pass_obj
def health(options: Options, any_replica: bool, max_age: str) -> None:
    """Exit 0 if a replica on this host (or any, with --any) heartbeated within --max-age.

    For liveness probes: run it in the container that runs beat.
    """
    try:
        limit = parse_duration(max_age, "--max-age")
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc
    host = socket.gethostname()
    with _opened(options) as (config, store):
        replicas = replica_statuses(store, config.namespace)
    mine = replicas if any_replica else [r for r in replicas if r.record.host == host]
    fresh = [r for r in mine if r.age <= limit]
    if fresh:
        best = min(fresh, key=lambda r: r.age)
        click.echo(f"ok: {best.record.replica} heartbeated {span(best.age)} ago")
        return
    where = "any host" if any_replica else f"host {host!r}"
    last = min(mine, key=lambda r: r.age, default=None)
    seen = f"; the latest was {span(last.age)} ago" if last else ""
    click.echo(
        f"unhealthy: no replica of namespace {config.namespace!r} on {where} heartbeated "
        f"within {span(limit)}{seen}",
        err=True,
    )
    sys.exit(1)


@main.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@_store_options
@click.pass_obj
def doctor_command(options: Options, as_json: bool) -> None:
    """Check the setup for common mistakes; exit 1 if any check finds a problem."""
    config = options.config()
    missing = missing_store(config)
    if missing is not None:
        findings = [doctor.Finding("store", doctor.Level.PROBLEM, missing)]
    else:
        store = store_from_config(config)
        try:
            schedule = _schedule_or_none(options, config, store)
            findings = doctor.run_checks(
                doctor.Context(
                    store=store,
                    config=_doctor_namespace(options, config, store),
                    app=options.app,
                    entries=None if schedule is None else schedule.entries,
                    broken=None if schedule is None else schedule.broken,
                )
            )
        finally:
            store.close()
    if as_json:
        _emit_json([dataclasses.asdict(f) for f in findings])
    else:
        for finding in findings:
            click.echo(f"{finding.level.value:8} {finding.check}: {finding.message}")
    if any(f.level is doctor.Level.PROBLEM for f in findings):
        sys.exit(1)


def _schedule_or_none(options: Options, config: Config, store: Store) -> Schedule | None:
    """The app's schedule with the store's entries added at run time; without them if the
    store cannot be read (the doctor reports the store's problem itself)."""
    try:
        return options.schedule(config, store)
    except SafebeatError:
        return options.schedule(config)


def _doctor_namespace(options: Options, config: Config, store: Store) -> Config:
    """The namespace doctor checks, chosen as every command chooses it.

    Where it cannot be chosen, the checks run on the default: the store check reports an
    unreachable store, and the namespace check lists a store's several namespaces.
    """
    try:
        return choose_namespace(options, config, store, _say)
    except SafebeatError:
        return config


@main.command()
@click.option(
    "--older-than",
    help="Delete history older than this (default: safebeat_retention).",
    metavar="DURATION",
)
@click.option(
    "--orphans",
    is_flag=True,
    help="Instead, forget entries no code defines any more (needs -A; see `plan`).",
)
@_store_options
@click.pass_obj
def prune(options: Options, older_than: str | None, orphans: bool) -> None:
    """Delete dispatch history and silent replicas past the retention, and expired effect keys.

    With --orphans, delete instead the state of entries registered in the store that the
    app's schedule (-A) no longer defines; their history stays. An entry a live replica
    still runs is kept, since that replica would register it again.
    """
    if orphans:
        _prune_orphans(options)
        return
    with _opened(options) as (config, store):
        keep = (
            config.retention if older_than is None else parse_duration(older_than, "--older-than")
        )
        deleted = operations.prune(
            store, config.namespace, before=store.clock() - keep, actor=operations.cli_actor()
        )
    click.echo(f"{store.display_url}: pruned {deleted} row(s) older than {span(keep)}")


def _prune_orphans(options: Options) -> None:
    _require_app(options, "prune --orphans", "compares the store with the app's schedule")
    actor = operations.cli_actor()
    with _opened(options) as (config, store):
        changes = _changes(options, config, store)
        forgotten = [
            c.name
            for c in planning.orphans(changes)
            if operations.forget_entry(store, config.namespace, c.name, actor=actor)
        ]
    for name in forgotten:
        click.echo(f"forgot {name!r}: no code defines it")
    for change in changes:
        if change.kind is Kind.REMOVED and change.run_by:
            click.echo(
                f"kept {change.name!r}: live replica(s) {', '.join(change.run_by)} still run it; "
                "prune again once they run the new code",
                err=True,
            )
    click.echo(
        f"{store.display_url}: forgot {len(forgotten)} orphaned entr"
        f"{'y' if len(forgotten) == 1 else 'ies'} in namespace {config.namespace!r}"
    )


def _changes(options: Options, config: Config, store: Store) -> list[Change]:
    """How the app's schedule (-A) and the entries added at run time differ from what the
    store has registered."""
    schedule = options.schedule(config, store)
    assert schedule is not None  # noqa: S101 - _require_app ran first
    return planning.plan(
        store.states(config.namespace),
        schedule,
        replica_statuses(store, config.namespace),
        store.clock(),
    )


@main.command("plan")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of lines.")
@_store_options
@click.pass_obj
def plan_command(options: Options, as_json: bool) -> None:
    """What running this app's schedule (-A) would change in the store, before a deploy.

    Lists entries added, removed (registered, but defined by no code: orphans), changed
    (with the next windows before and after) and broken. Exit status 0 when nothing
    would change, 1 otherwise, so CI can gate a deploy on it.
    """
    _require_app(options, "plan", "compares the store with the app's schedule")
    config = options.config()
    if missing_store(config) is not None:  # beat has not run yet: every entry is new
        schedule = options.schedule(config)
        assert schedule is not None  # noqa: S101 - _require_app ran first
        display_url = redact(config.url)
        changes = planning.plan({}, schedule, [], datetime.now(timezone.utc))
    else:
        with _opened(options) as (config, store):
            changes = _changes(options, config, store)
        display_url = store.display_url
    if as_json:
        _emit_json(
            {
                "store": display_url,
                "namespace": config.namespace,
                "changes": [dataclasses.asdict(c) for c in changes],
            }
        )
    else:
        _print_plan(display_url, config.namespace, changes)
    if changes:
        sys.exit(1)


_PLAN_HEADINGS = {
    Kind.ADDED: "added",
    Kind.REMOVED: "removed (registered, defined by no code; `prune --orphans` forgets them)",
    Kind.CHANGED: "changed",
    Kind.BROKEN: "broken (beat would skip them)",
}
_PLAN_MARKS = {Kind.ADDED: "+", Kind.REMOVED: "-", Kind.CHANGED: "~", Kind.BROKEN: "!"}


def _print_plan(display_url: str, namespace: str, changes: Sequence[Change]) -> None:
    click.echo(f"store {display_url}, namespace {namespace!r}")
    if not changes:
        click.echo("\nno changes: the store has every entry as the app defines it")
        return
    for kind, heading in _PLAN_HEADINGS.items():
        group = [c for c in changes if c.kind is kind]
        if group:
            click.echo(f"\n{heading}:")
        for change in group:
            click.echo(f"  {_PLAN_MARKS[kind]} {change.name}: {_plan_line(change)}")
            if kind is Kind.CHANGED and not change.schedule_changed:
                continue  # same windows: only the arguments, options or policy changed
            if kind in {Kind.REMOVED, Kind.CHANGED}:
                click.echo(f"      next windows before: {describe_windows(change.next_before)}")
            if kind in {Kind.ADDED, Kind.CHANGED}:
                click.echo(f"      next windows after:  {describe_windows(change.next_after)}")
    count = len(changes)
    click.echo(f"\n{count} entr{'y' if count == 1 else 'ies'} would change")


def _plan_line(change: Change) -> str:
    if change.kind is Kind.ADDED:
        return str(change.after)
    if change.kind is Kind.REMOVED:
        running = f" (still run by live {', '.join(change.run_by)})" if change.run_by else ""
        return f"{change.before}{running}"
    if change.kind is Kind.BROKEN:
        return str(change.problem)
    if change.schedule_changed:
        return f"{change.before} -> {change.after}"
    return f"{change.after} (arguments, options or policy changed)"


_NOTE = click.option("--note", help="Why, for the audit trail (`safebeat audit`).", metavar="TEXT")


@main.command()
@click.argument("entry")
@click.option(
    "--until",
    "until_text",
    help="End the pause by itself at this instant (ISO 8601, with zone).",
    metavar="ISO",
)
@_NOTE
@_store_options
@click.pass_obj
def pause(options: Options, entry: str, until_text: str | None, note: str | None) -> None:
    """Pause ENTRY for every replica: its windows are skipped (reason `paused`) until resumed,
    or with --until until that instant, when every replica resumes it by itself."""
    until = None if until_text is None else _instant(until_text, "--until")
    with _opened(options) as (config, store):
        operations.set_paused(
            store,
            config.namespace,
            entry,
            True,
            actor=operations.cli_actor(),
            until=until,
            note=note,
        )
    ends = "until resumed" if until is None else f"until {when(until)}, then resumes by itself"
    click.echo(
        f"paused {entry!r} in namespace {config.namespace!r}; "
        f"every replica skips its windows {ends}"
    )


@main.command()
@click.argument("entry")
@_NOTE
@_store_options
@click.pass_obj
def resume(options: Options, entry: str, note: str | None) -> None:
    """Resume ENTRY: its next window is dispatched; windows that passed while paused are not."""
    with _opened(options) as (config, store):
        operations.set_paused(
            store, config.namespace, entry, False, actor=operations.cli_actor(), note=note
        )
    click.echo(f"resumed {entry!r} in namespace {config.namespace!r}")


def _audit_row(r: AuditRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "at": r.at,
        "actor": r.actor,
        "action": r.action,
        "entry": r.entry,
        "windows": list(r.windows),
        "note": r.note,
    }


def _windows_cell(found: Sequence[datetime]) -> str:
    shown = ", ".join(when(w) for w in found[:2])
    return f"{shown} (+{len(found) - 2})" if len(found) > 2 else (shown or "-")


@main.command()
@click.option("--entry", help="Only the actions on this entry.", metavar="NAME")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(1, 100_000),
    help="How many of the newest actions to show.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@_store_options
@click.pass_obj
def audit(options: Options, entry: str | None, limit: int, as_json: bool) -> None:
    """Who paused, resumed, triggered, backfilled, pruned or migrated, when and with what
    note: the operator actions from the CLI, the Django admin and the web console."""
    with _opened(options) as (config, store):
        records = store.audit(config.namespace, entry, limit=limit)
    if as_json:
        _emit_json([_audit_row(r) for r in records])
        return
    click.echo(
        _table(
            ["when", "who", "action", "entry", "windows", "note"],
            [
                [when(r.at), r.actor, r.action.value, r.entry or "-", _windows_cell(r.windows),
                 r.note or "-"]
                for r in records
            ],
        )
    )  # fmt: skip


def _require_app(options: Options, command: str, why: str = "publishes the task") -> None:
    if options.app_name is None:
        raise UsageProblem(
            f"{command} {why}, so it needs the Celery app: give it with -A, "
            "as to `celery -A proj beat`"
        )


def _compiled_entry(options: Options, config: Config, store: Store, name: str) -> Entry:
    """ENTRY as this app's beat runs it (a beat_schedule item, a django-celery-beat row or an
    entry added at run time)."""
    schedule = options.schedule(config, store)
    assert schedule is not None  # noqa: S101 - _require_app ran first
    return operations.scheduled_entry(schedule, name, config.namespace)


def _report(published: operations.Published, what: str) -> None:
    for claim in published.sent:
        click.echo(f"{what}: window {when(claim.window)} sent (task id {claim.task_id})")
    for claim in published.unsent:
        click.echo(
            f"{what}: window {when(claim.window)} claimed but the broker is unreachable; "
            "a beat replica re-publishes it after safebeat_claim_timeout"
        )
    for window, error in published.failed.items():
        click.echo(f"{what}: window {window} failed: {error}", err=True)
    if published.already_claimed:
        click.echo(f"{what}: {published.already_claimed} window(s) already had a row; left alone")
    if published.failed:
        sys.exit(1)


@main.command()
@click.argument("entry")
@_NOTE
@_store_options
@click.pass_obj
def trigger(options: Options, entry: str, note: str | None) -> None:
    """Run ENTRY once now, outside its schedule (recorded with reason `trigger`). Needs -A."""
    _require_app(options, "trigger")
    with _opened(options) as (config, store):
        compiled = _compiled_entry(options, config, store, entry)
        published = operations.trigger(
            options.app, store, config.namespace, compiled, actor=operations.cli_actor(), note=note
        )
    _report(published, f"triggered {entry!r}")


def _instant(value: str, name: str) -> datetime:
    try:
        return parse_instant(value)
    except BadInstant as exc:
        raise click.BadParameter(str(exc), param_hint=name) from None


@main.command()
@click.argument("entry")
@click.option("--from", "start", required=True, help="First instant (ISO 8601, with zone).")
@click.option("--to", "end", required=True, help="Last instant (ISO 8601, with zone).")
@click.option(
    "--limit",
    default=operations.BACKFILL_LIMIT,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Refuse ranges with more windows than this.",
)
@_NOTE
@_store_options
@click.pass_obj
def backfill(
    options: Options, *, entry: str, start: str, end: str, limit: int, note: str | None
) -> None:
    """Dispatch ENTRY's windows between --from and --to that were never sent. Needs -A.

    Windows already sent, skipped or claimed are left alone; each new one is recorded with
    reason `backfill` and keeps its own window (and task id).
    """
    first, last = _instant(start, "--from"), _instant(end, "--to")
    _require_app(options, "backfill")
    with _opened(options) as (config, store):
        compiled = _compiled_entry(options, config, store, entry)
        published = operations.backfill(
            options.app,
            store,
            config.namespace,
            compiled,
            start=first,
            end=last,
            limit=limit,
            actor=operations.cli_actor(),
            note=note,
        )
    _report(published, f"backfilled {entry!r}")


@main.command("exec", context_settings={"allow_interspersed_args": False})
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
@_store_options
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


def _bind(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter(
            f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:8765", param_hint="--bind"
        )
    return host.strip("[]"), int(port)


@main.command()
@click.option(
    "--bind",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve. Another address than loopback needs --token or --user/--password.",
)
@click.option(
    "--token",
    envvar="SAFEBEAT_WEB_TOKEN",
    metavar="TOKEN",
    help="Require this token: `Authorization: Bearer TOKEN`, or as the basic-auth password "
    "[env: SAFEBEAT_WEB_TOKEN].",
)
@click.option(
    "--user",
    envvar="SAFEBEAT_WEB_USER",
    metavar="NAME",
    help="Require HTTP basic auth with this user name [env: SAFEBEAT_WEB_USER].",
)
@click.option(
    "--password",
    envvar="SAFEBEAT_WEB_PASSWORD",
    metavar="PASSWORD",
    help="The basic-auth password of --user [env: SAFEBEAT_WEB_PASSWORD].",
)
@click.option(
    "--read-only",
    is_flag=True,
    envvar="SAFEBEAT_WEB_READ_ONLY",
    help="Show everything, change nothing: no pause, resume, trigger or backfill.",
)
@_store_options
@click.pass_obj
def web(
    options: Options,
    *,
    bind: str,
    token: str | None,
    user: str | None,
    password: str | None,
    read_only: bool,
) -> None:
    """Serve the web console: entries, history, replicas, doctor; pause, trigger, backfill.

    Needs the `web` extra (pip install "safebeat[web]"); trigger and backfill need -A.
    """
    host, port = _bind(bind)
    try:
        import uvicorn  # noqa: PLC0415 - the web extra is optional

        from safebeat import web as console  # noqa: PLC0415
    except ImportError as exc:
        raise click.ClickException(
            f'safebeat web needs the web extra ({exc.name} is missing): pip install "safebeat[web]"'
        ) from exc
    try:
        credentials = console.Credentials(token=token or None, username=user, password=password)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from exc
    if not credentials.required and not console.is_loopback(host):
        raise UsageProblem(
            f"--bind {bind} is reachable from other machines, and the console pauses and "
            "triggers entries: give --token (or SAFEBEAT_WEB_TOKEN) or --user and --password, "
            "or bind 127.0.0.1"
        )
    options.app  # noqa: B018 - import the app now: a bad -A is an error before serving
    application = console.app(
        options.app,
        url=options.url,
        namespace=options.namespace,
        read_only=read_only,
        credentials=credentials,
    )
    with _opened(options) as (config, store):  # fail now, in one line, not at the first page
        where = f"{store.display_url}, namespace {config.namespace!r}"
    mode = "read-only" if read_only else "read-write"
    click.echo(f"safebeat web: {where} ({mode}) on http://{bind}/", err=True)
    uvicorn.run(application, host=host, port=port, log_level="warning")


# Defined in their own modules, which import this one's helpers.
from safebeat.cli_schedule import schedule  # noqa: E402

main.add_command(schedule)
