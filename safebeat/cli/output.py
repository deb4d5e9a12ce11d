"""How commands print: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click

from safebeat.display import printable
from safebeat.identity import format_window

R = TypeVar("R")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """`rows` under `headers`, each column as wide as its widest cell; a cell's newlines,
    ESC and other control characters show as escapes (`display.printable`)."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def fields(record: object, names: str) -> dict[str, Any]:
    """The attributes `names` (space-separated) of `record`, keyed by their names."""
    return {name: getattr(record, name) for name in names.split()}


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


def emit_json(value: Any) -> None:
    """Print `value` as indented JSON: instants as in the store, durations in seconds."""
    click.echo(json.dumps(_jsonable(value), indent=2, sort_keys=True))


def emit_records(
    as_json: bool,
    records: Sequence[R],
    json_row: Callable[[R], dict[str, Any]],
    headers: Sequence[str],
    cells: Callable[[R], Sequence[str]],
) -> None:
    """Print `records`: a JSON list of their `json_row`s with --json, else a table of their
    `cells` under `headers`."""
    if as_json:
        emit_json([json_row(r) for r in records])
    else:
        click.echo(table(headers, [cells(r) for r in records]))
