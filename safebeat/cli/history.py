"""`safebeat history` (an entry's recent windows) and `safebeat audit` (operator actions)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click

from safebeat.cli.context import Options
from safebeat.cli.options import opened, store_options
from safebeat.cli.output import emit_records, fields
from safebeat.display import attempts, note, span, unknown_entry, when
from safebeat.ops.overview import empty_namespace
from safebeat.records import AuditRecord, DispatchRecord

_HISTORY_FIELDS = (
    "window status reason skipped_from skipped_count replica claimed_at sent_at attempts "
    "task_id started_at finished_at outcome runtime worker duplicates error"
)


def _history_row(r: DispatchRecord) -> dict[str, Any]:
    return {
        **fields(r, _HISTORY_FIELDS),
        "lag": None if r.sent_at is None else r.sent_at - r.window,
    }


#: Entry names a `history` without an entry lists, at most.
LISTED_ENTRIES = 20


@click.command()
@click.argument("entry", required=False)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@store_options
@click.pass_obj
def history(options: Options, entry: str | None, limit: int, as_json: bool) -> None:
    """ENTRY's recent windows: who sent each, lag, outcome, and what was skipped and why."""
    with opened(options) as (config, store):
        known = store.states(config.namespace)
        if not known:
            raise click.ClickException(empty_namespace(store, config.namespace))
        if entry is None:
            raise click.UsageError(_name_one(sorted(known), config.namespace))
        if entry not in known:
            raise click.ClickException(unknown_entry(entry, known, config.namespace))
        rows = store.history(config.namespace, entry, limit=limit)
    emit_records(
        as_json,
        rows,
        _history_row,
        ["window", "status", "replica", "lag", "attempts", "outcome", "runtime", "note"],
        _history_cells,
    )


def _name_one(known: Sequence[str], namespace: str) -> str:
    """The error of a `history` given no entry: the entries it could show."""
    shown = ", ".join(repr(name) for name in known[:LISTED_ENTRIES])
    more = len(known) - LISTED_ENTRIES
    rest = f" and {more} more (`safebeat status` lists them all)" if more > 0 else ""
    return f"Missing argument 'ENTRY': name an entry of namespace {namespace!r}: {shown}{rest}"


def _history_cells(r: DispatchRecord) -> list[str]:
    return [
        when(r.window),
        r.status.value,
        r.replica,
        span(None if r.sent_at is None else r.sent_at - r.window),
        attempts(r),
        "-" if r.outcome is None else r.outcome.value,
        span(r.runtime),
        note(r),
    ]


def _audit_row(r: AuditRecord) -> dict[str, Any]:
    return fields(r, "id at actor action entry windows note")


def _windows_cell(found: Sequence[datetime]) -> str:
    shown = ", ".join(when(w) for w in found[:2])
    return f"{shown} (+{len(found) - 2})" if len(found) > 2 else (shown or "-")


@click.command()
@click.option("--entry", help="Only the actions on this entry.", metavar="NAME")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(1, 100_000),
    help="How many of the newest actions to show.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@store_options
@click.pass_obj
def audit(options: Options, entry: str | None, limit: int, as_json: bool) -> None:
    """Who paused, resumed, triggered, backfilled, pruned or migrated, when and with what
    note: the operator actions from the CLI, the Django admin and the web console."""
    with opened(options) as (config, store):
        records = store.audit(config.namespace, entry, limit=limit)
    emit_records(
        as_json,
        records,
        _audit_row,
        ["when", "who", "action", "entry", "windows", "note"],
        _audit_cells,
    )


def _audit_cells(r: AuditRecord) -> list[str]:
    windows = _windows_cell(r.windows)
    return [when(r.at), r.actor, r.action.value, r.entry or "-", windows, r.note or "-"]
