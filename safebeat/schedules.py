"""Add, change and remove schedule entries while beat runs, without Django.

    import safebeat.schedules

    safebeat.schedules.add(app, "report-42", "proj.tasks.report", "0 9 * * 1-5",
                           kwargs={"tenant": 42},
                           options={"safebeat": {"timezone": "Europe/Berlin"}})
    safebeat.schedules.remove(app, "report-42")

The definitions live in the app's store (`safebeat_url`, namespace `safebeat_namespace`),
so they survive restarts and every replica of `safebeat.Scheduler` picks them up within
about a second. They sit beside the app's `beat_schedule`: a name the code (or a
django-celery-beat row) already uses is refused. Each call checks the entry as beat will
compile it, so a bad crontab or time zone fails here, not in beat's log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from safebeat.config import Config, config_from_app
from safebeat.entries import Entry
from safebeat.entries.app_entries import beat_schedule
from safebeat.entries.runtime_definitions import compile_runtime, encode
from safebeat.errors import EntryError
from safebeat.limits import check_name
from safebeat.stores import Store, store_from_config

__all__ = ["StoredEntry", "add", "get", "list", "remove", "save", "update"]


@dataclass(frozen=True)
class StoredEntry:
    """An entry added at run time: its name, the compiled entry, and the stored JSON text."""

    name: str
    entry: Entry
    spec: str


def add(
    app: Any,
    name: str,
    task: str,
    schedule: object,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    store: Store | None = None,
) -> StoredEntry:
    """Add entry `name`; raise EntryError if the name is taken or the entry is malformed.

    `schedule`: seconds (a number, a timedelta, "30s"), a crontab (Celery's or
    `safebeat.crontab`, or its 5 or 6 fields as text) or an aware datetime (one window).
    `options` are Celery's send options with safebeat's policy under `"safebeat"`, as in
    `beat_schedule`. `store`: a store to use instead of opening the app's.
    """
    spec = encode(name, task, schedule, args=args, kwargs=kwargs, options=options)
    config = config_from_app(app)
    with _opened(config, store) as opened:
        return save(app, config, opened, name, spec, replace=False)


def update(
    app: Any,
    name: str,
    task: str,
    schedule: object,
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    store: Store | None = None,
) -> StoredEntry:
    """Replace the definition of entry `name`, added before; raise EntryError if it was not.

    As when a `beat_schedule` item changes: a new schedule starts after the change (no
    window before it fires as a surprise); new arguments go with the next window.
    """
    spec = encode(name, task, schedule, args=args, kwargs=kwargs, options=options)
    config = config_from_app(app)
    with _opened(config, store) as opened:
        return save(app, config, opened, name, spec, replace=True)


def remove(app: Any, name: str, *, store: Store | None = None) -> bool:
    """Remove entry `name`; return False if no entry of that name was added.

    Replicas stop dispatching it within about a second; its history stays. A name no
    store could hold is a LimitError (`safebeat.limits`).
    """
    check_name(name)
    config = config_from_app(app)
    with _opened(config, store) as opened:
        return opened.delete_runtime_entry(config.namespace, name)


def get(app: Any, name: str, *, store: Store | None = None) -> StoredEntry | None:
    """Entry `name` as added, or None."""
    return list(app, store=store).get(name)


def list(app: Any, *, store: Store | None = None) -> dict[str, StoredEntry]:
    """Every entry added at run time in the app's namespace, by name.

    A stored definition this safebeat cannot compile raises EntryError naming it.
    """
    config = config_from_app(app)
    with _opened(config, store) as opened:
        specs = opened.runtime_entries(config.namespace)
    return {name: _compiled(app, config, name, spec) for name, spec in sorted(specs.items())}


def save(
    app: Any, config: Config, store: Store, name: str, spec: str, *, replace: bool
) -> StoredEntry:
    """Store `spec` (from `safebeat.entries.runtime_definitions.encode`) as entry `name` in
    `config`'s namespace:
    what add and update do, for callers that chose the config and store (the CLI)."""
    code = beat_schedule(app, config)
    if code.find(name) is not None:
        raise EntryError(
            name,
            "the app's beat_schedule (or a django-celery-beat row) already defines it; "
            "choose another name, or change it in the code",
        )
    stored = _compiled(app, config, name, spec)
    if not store.save_runtime_entry(config.namespace, name, spec, replace=replace):
        problem = (
            "no entry of that name was added at run time; add it first"
            if replace
            else "an entry of that name was already added; update or remove it first"
        )
        raise EntryError(name, f"{problem} (namespace {config.namespace!r})")
    return stored


def _compiled(app: Any, config: Config, name: str, spec: str) -> StoredEntry:
    compiled = compile_runtime({name: spec}, taken=(), app_timezone=app.timezone, config=config)
    if name in compiled.broken:
        raise compiled.broken[name]
    return StoredEntry(name, compiled.entries[name], spec)


@contextmanager
def _opened(config: Config, store: Store | None) -> Iterator[Store]:
    """The given store, or the app's (migrated first if beat would migrate it), closed after."""
    if store is not None:
        yield store
        return
    opened = store_from_config(config)
    try:
        if config.auto_migrate:
            opened.migrate()
        yield opened
    finally:
        opened.close()
