"""What an operator does to a running schedule: pause, resume, trigger, backfill, skip the
next window, prune and migrate, each recorded in the store's audit trail.

Used by the `safebeat` CLI, the Django admin and the web console, through the table of
actions (`safebeat.ops.actions`), which each pass who acts (`actor`: the signed-in user,
or `cli_actor()`). Every value they pass is checked here,
once, against what every store can hold and read back (`safebeat.limits`): a `LimitError`
names the value and the limit before anything is stored. Pausing only sets a flag (and an optional
end) in the store; every replica reads it at its next tick. Triggering and backfilling
claim windows under the same unique key as the scheduler does, then publish them from
this process, so a window already sent is never sent again. Each operation records its
audit line once it has done its work, so the trail holds what was done.
"""

from __future__ import annotations

import getpass
import itertools
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from safebeat import windows
from safebeat.beat.broker import app_connection_errors
from safebeat.beat.dispatch import Dispatched, Dispatcher
from safebeat.display import unknown_entry
from safebeat.entries import Entry
from safebeat.entries.app_entries import Schedule
from safebeat.errors import SafebeatError, UnreadableState
from safebeat.facts import WindowRow
from safebeat.identity import Replica, current_replica, task_id_for
from safebeat.limits import check_actor, check_instant, check_name, check_namespace, check_note
from safebeat.ops.overview import SKIP_SEARCH
from safebeat.records import AuditAction, AuditEvent, Claim, Pause
from safebeat.stores.administering import claims_of
from safebeat.stores.per_process import config_of
from safebeat.stores.protocols import Store

#: Most windows one backfill claims unless asked for more.
BACKFILL_LIMIT = 1000
_MICROSECOND = timedelta(microseconds=1)


class OperationError(SafebeatError):
    """An operation refused, with the reason (unknown entry, a range in the future, ...)."""


@dataclass(frozen=True)
class Published:
    """What an operation claimed and published.

    `sent`: published; `unsent`: claimed but the broker was unreachable (a beat replica
    re-publishes them after safebeat_claim_timeout); `failed`: window (ISO) -> error of
    messages that cannot be published; `already_claimed`: windows that had a row.
    """

    sent: Sequence[Claim]
    unsent: Sequence[Claim]
    failed: dict[str, str]
    already_claimed: int


def cli_actor() -> str:
    """Who acts from a shell: the OS user at this host (`alice@web-1`)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _operator(actor: str) -> Replica:
    """The sender recorded on an operator's windows: the actor in place of the host, so
    `status` and `history` say who sent them (`trigger by alice@ops-1`), not a process
    that appears in no replica list."""
    return replace(current_replica(), host=actor)


def set_paused(
    store: Store,
    namespace: str,
    entry: str,
    paused: bool,
    *,
    actor: str,
    until: datetime | None = None,
    note: str | None = None,
) -> None:
    """Pause (or resume) `entry` for every replica, from their next tick on (see `pause_entry`)."""
    pause_entry(store, namespace, entry, Pause(paused, until, note), actor=actor)


@dataclass(frozen=True)
class Fields:
    """What a surface calls the instants of a pause and a backfill, so that its errors
    name the option or form field the operator filled in (the CLI's, by default)."""

    until: str = "--until"
    start: str = "--from"
    end: str = "--to"


CLI_FIELDS = Fields()


def pause_entry(
    store: Store,
    namespace: str,
    entry: str,
    pause: Pause,
    *,
    actor: str,
    fields: Fields = CLI_FIELDS,
) -> None:
    """Store `pause` for `entry`, read by every replica from its next tick on, and record it
    in the audit trail as `actor`'s pause or resume.

    A pause with `until` ends by itself there: every replica dispatches the entry's windows
    from that instant on, with no resume needed. `until` must be in the future (store time).
    An empty note is no note; a resume's note goes to the audit trail only.
    """
    _check_action(namespace, entry, actor, pause.note)
    if pause.until is not None:
        until = check_instant(pause.until, f"{fields.until} (the pause's end)")
        pause = replace(pause, until=until)
    if pause.paused and pause.until is not None:
        now = store.clock()
        if pause.until <= now:
            raise OperationError(
                f"{fields.until}: the pause of {entry!r} would end at {pause.until.isoformat()}, "
                "which is not "
                f"in the future (store time {now.isoformat()}); give a later end, or resume"
            )
    pause = replace(pause, note=pause.note or None)
    if not store.set_paused(namespace, entry, pause):
        raise OperationError(f"no entry {entry!r} is registered in namespace {namespace!r}")
    action = AuditAction.PAUSE if pause.paused else AuditAction.RESUME
    windows_ = (pause.until,) if pause.paused and pause.until is not None else ()
    store.record_audit(namespace, AuditEvent(actor, action, entry, windows_, pause.note))


def prune(store: Store, namespace: str, *, before: datetime, actor: str) -> int:
    """Delete history, silent replicas and audit records older than `before`, and expired
    effect keys (see Store.prune); return the dispatch rows and effect keys deleted."""
    _check_action(namespace, None, actor, None)
    deleted = store.prune(namespace, check_instant(before, "--before"))
    note = f"before {before.isoformat()}: {deleted} row(s)"
    store.record_audit(namespace, AuditEvent(actor, AuditAction.PRUNE, note=note))
    return deleted


def forget_entry(store: Store, namespace: str, entry: str, *, actor: str) -> bool:
    """Forget `entry`'s shared state (see Store.forget_entry: `prune --orphans`); return
    whether it was registered. Recorded as a prune of that entry."""
    _check_action(namespace, entry, actor, None)
    if not store.forget_entry(namespace, entry):
        return False
    note = "forgot its state: no code defines it"
    store.record_audit(namespace, AuditEvent(actor, AuditAction.PRUNE, entry, note=note))
    return True


def migrate(store: Store, namespace: str, *, actor: str) -> tuple[int, int]:
    """Bring the store's schema to this safebeat's (see Store.migrate); return the
    versions before and after.

    A migration that changed the schema is recorded in `namespace`'s audit trail, since
    the trail lives in the schema it makes; one that found nothing to do is not.
    """
    before = store.schema_version()
    version = store.migrate()
    if version != before:
        note = f"schema at version {version}"
        store.record_audit(namespace, AuditEvent(actor, AuditAction.MIGRATE, note=note))
    return before, version


def trigger(
    app: Any, store: Store, namespace: str, entry: Entry, *, actor: str, note: str | None = None
) -> Published:
    """Run `entry` once now, outside its schedule: a window at the store's current instant.

    The window keeps its microseconds, so it never coincides with a scheduled window,
    and is recorded with reason `trigger`.
    """
    _check_action(namespace, entry.name, actor, note)
    _require_registered(store, namespace, entry.name)
    now = store.clock()
    window = now if now.microsecond else now + _MICROSECOND
    return _claim_publish_and_audit(
        app, store, namespace, entry, [window], action=AuditAction.TRIGGER, actor=actor, note=note
    )


def backfill(
    app: Any,
    store: Store,
    namespace: str,
    entry: Entry,
    *,
    start: datetime,
    end: datetime,
    limit: int = BACKFILL_LIMIT,
    actor: str,
    note: str | None = None,
    fields: Fields = CLI_FIELDS,
) -> Published:
    """Dispatch the windows of `entry` in `[start, end]` that have no row yet.

    Windows already sent, skipped or claimed are left alone. `end` may not be in the
    future (the scheduler owns those windows), and at most `limit` windows are claimed.
    """
    _check_action(namespace, entry.name, actor, note)
    found = backfill_windows(
        store, namespace, entry, start=start, end=end, limit=limit, fields=fields
    )
    return _claim_publish_and_audit(
        app, store, namespace, entry, found, action=AuditAction.BACKFILL, actor=actor, note=note
    )


def backfill_windows(
    store: Store,
    namespace: str,
    entry: Entry,
    *,
    start: datetime,
    end: datetime,
    limit: int = BACKFILL_LIMIT,
    fields: Fields = CLI_FIELDS,
) -> list[datetime]:
    """The windows of `entry` in `[start, end]` that `backfill` would claim where free.

    Raise OperationError for a range backfill refuses: reversed, reaching into the
    future, holding no window or more than `limit`, or an entry not registered;
    UnreadableState for an entry whose state the store cannot read back; LimitError
    for an instant outside what every store holds (`safebeat.limits`).
    """
    start, end = check_instant(start, fields.start), check_instant(end, fields.end)
    if start > end:
        raise OperationError(
            f"{fields.start} {start.isoformat()} is after {fields.end} {end.isoformat()}"
        )
    state = _require_registered(store, namespace, entry.name)
    if state.unreadable is not None:  # its anchor is a placeholder: no window to trust
        raise UnreadableState(entry.name, state.unreadable)
    now = store.clock()
    if end > now:
        raise OperationError(
            f"{fields.end} {end.isoformat()} is in the future (store time {now.isoformat()}); "
            "future windows are the scheduler's"
        )
    found = list(
        itertools.islice(
            windows.windows_between(entry.rule, start - _MICROSECOND, end, state.anchor),
            limit + 1,
        )
    )
    if len(found) > limit:
        raise OperationError(
            f"entry {entry.name!r} has more than {limit} windows in that range; "
            "narrow it or raise --limit"
        )
    if not found:
        raise OperationError(f"entry {entry.name!r} has no window in that range")
    return found


def skip_next(
    store: Store, namespace: str, entry: Entry, *, actor: str, note: str | None = None
) -> datetime:
    """Record `entry`'s next window as skipped (reason `operator`) and return it.

    The next window is the one `safebeat status` shows: the first of the entry's schedule
    after the store's now and after every window already decided, that has no row yet (so
    skipping twice skips the two next windows). Its row is written under the window's
    unique key, like a tick's: when beat plans that window, its claim meets the row and
    leaves it, so the task is not sent, and the windows after it are sent as usual.
    Refused (OperationError) for an entry not registered, paused (its windows are skipped
    anyway), or with no window left (a `once` entry that ran, a bounded one past its end).
    """
    _check_action(namespace, entry.name, actor, note)
    state = _require_registered(store, namespace, entry.name)
    if state.unreadable is not None:
        raise UnreadableState(entry.name, state.unreadable)
    now = store.clock()
    if state.paused_at(now):
        if state.paused_until is None:
            raise OperationError(
                f"entry {entry.name!r} is paused: its windows are skipped (reason paused) "
                "until it is resumed; resume it first"
            )
        raise OperationError(
            f"entry {entry.name!r} is paused until {state.paused_until.isoformat()}: its "
            "windows before then are skipped (reason paused); skip its next window once "
            "the pause has ended, or resume it first"
        )
    after, replica = max(now, state.decided_until), _operator(actor)
    for _ in range(SKIP_SEARCH):
        window = windows.next_window(entry.rule, after, state.anchor)
        if window is None:
            raise OperationError(
                f"entry {entry.name!r} has no window after {after.isoformat()}: nothing to skip"
            )
        row = WindowRow(entry.name, window, windows.SkipReason.OPERATOR.value)
        if store.write_windows(namespace, [row], replica=replica):
            event = AuditEvent(actor, AuditAction.SKIP, entry.name, (window,), note or None)
            store.record_audit(namespace, event)
            return window
        after = window
    raise OperationError(
        f"entry {entry.name!r}: its next {SKIP_SEARCH} windows already have a row; nothing skipped"
    )


def scheduled_entry(schedule: Schedule, name: str, namespace: str) -> Entry:
    """Entry `name` as this app's beat runs it, to trigger or backfill.

    Raise its EntryError if beat skips it as broken, OperationError if the app lacks it.
    """
    found = schedule.find(name)
    if isinstance(found, Entry):
        return found
    if found is not None:
        raise found
    raise OperationError(unknown_entry(name, schedule.entries, namespace))


def _check_action(namespace: str, entry: str | None, actor: str, note: str | None) -> None:
    """Raise LimitError for a value of an operator action no store could hold and read
    back (`safebeat.limits`), before anything is stored."""
    check_namespace(namespace)
    if entry is not None:
        check_name(entry)
    check_actor(actor)
    check_note(note)


def _require_registered(store: Store, namespace: str, name: str) -> Any:
    state = store.states(namespace).get(name)
    if state is None:
        raise OperationError(
            f"no entry {name!r} is registered in namespace {namespace!r} "
            "(is beat running with this namespace?)"
        )
    return state


def _claim_publish_and_audit(
    app: Any,
    store: Store,
    namespace: str,
    entry: Entry,
    windows_to_claim: Sequence[datetime],
    *,
    action: AuditAction,
    actor: str,
    note: str | None,
) -> Published:
    """Claim a trigger's or backfill's windows (with reason `action`), publish them, and
    record the action with the windows it claimed (a window that already had a row is not
    the operator's doing)."""
    replica = _operator(actor)
    rows = [
        WindowRow(entry.name, w, action.value, task_id_for(namespace, entry.name, w), entry.task)
        for w in windows_to_claim
    ]
    claims = claims_of(store.write_windows(namespace, rows, replica=replica))
    claimed_at = time.monotonic()
    dispatcher = Dispatcher(app, claim_timeout=config_of(app).claim_timeout, replica=replica)
    dispatched = Dispatched(unsent=claims)
    if claims:
        broker_down = app_connection_errors(app)
        try:
            with app.producer_or_acquire() as producer:
                dispatched = dispatcher.dispatch(
                    store,
                    namespace,
                    claims,
                    entries={entry.name: entry},
                    connection=producer.connection,
                    producer=lambda: producer,
                    claimed_at=claimed_at,
                )
        except broker_down:
            pass  # no producer at all: every claim stays claimed, for beat to re-publish
    by_id = {c.id: c for c in claims}
    failed = {by_id[i].window: error for i, error in dispatched.failed.items()}
    claimed = sorted([*(c.window for c in (*dispatched.sent, *dispatched.unsent)), *failed])
    store.record_audit(
        namespace, AuditEvent(actor, action, entry.name, tuple(claimed), note or None)
    )
    return Published(
        sent=dispatched.sent,
        unsent=dispatched.unsent,
        failed={window.isoformat(): error for window, error in failed.items()},
        already_claimed=len(windows_to_claim) - len(claims),
    )
