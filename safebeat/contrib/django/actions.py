"""What the admin's entries page does to an entry: pause, resume, trigger now, backfill.

Each is recorded in the store's audit trail under the admin user's name.

The actions are `safebeat.ops.operations`' (the CLI's `pause`, `resume`, `trigger` and
`backfill`), on the `django://` store of the database the page reads. Triggering and
backfilling send the entry's task with its arguments and options, which the store does
not keep: the entry is compiled here from the Celery app, as beat compiles it. The
candidates are the enabled django-celery-beat row of that name (what `DatabaseScheduler`
runs) and the app's `beat_schedule` item (with stock beat's own entries). The one whose
digest is the definition beat registered is sent; if neither is, the one
`DatabaseScheduler` prefers (the row) is sent, with a warning that beat has not read it
yet. Messages are translated (`gettext`) into the language of the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from safebeat.app_schedule import periodic_task_schedule, settings_schedule
from safebeat.config import Config, config_from_app
from safebeat.entries import Entry
from safebeat.errors import EntryError, SafebeatError
from safebeat.identity import format_window
from safebeat.ops import operations
from safebeat.records import Pause
from safebeat.stores.base import Store

if TYPE_CHECKING:
    from safebeat.stores.django.base import OpenedDjangoStore

SUCCESS, WARNING, ERROR = messages.SUCCESS, messages.WARNING, messages.ERROR


@dataclass(frozen=True)
class Message:
    """What an action tells the admin user: a level of django.contrib.messages, and text."""

    level: int
    text: str


def set_paused(store: Store, namespace: str, name: str, pause: Pause, *, actor: str) -> Message:
    """Pause (until `pause.until`, if given, with its note) or resume one entry for every
    replica, as `actor` (the admin user's name, for the audit trail)."""
    try:
        operations.pause_entry(store, namespace, name, pause, actor=actor)
    except SafebeatError as exc:
        if pause.paused:
            failed = _("could not pause %(name)r: %(error)s")
        else:
            failed = _("could not resume %(name)r: %(error)s")
        return Message(ERROR, failed % _args(name, exc))
    names = {"name": name, "namespace": namespace}
    if pause.paused and pause.until is not None:
        return Message(
            SUCCESS,
            _(
                "paused %(name)r (namespace %(namespace)r) until %(until)s: its windows "
                "before then are skipped (reason paused); it resumes by itself"
            )
            % {**names, "until": format_window(pause.until)},
        )
    if pause.paused:
        return Message(
            SUCCESS,
            _(
                "paused %(name)r (namespace %(namespace)r): its windows are skipped "
                "(reason paused) until it is resumed"
            )
            % names,
        )
    return Message(
        SUCCESS,
        _(
            "resumed %(name)r (namespace %(namespace)r): its next window is sent; windows "
            "that passed while it was paused are not"
        )
        % names,
    )


def trigger(app: Any, store: Store, namespace: str, name: str, *, actor: str) -> list[Message]:
    """Send one window of `name` now (see the module docstring for how it is compiled), as
    `actor`."""
    try:
        entry, mismatch = registered_entry(app, store, namespace, name)
        published = operations.trigger(app, store, namespace, entry, actor=actor)
    except SafebeatError as exc:
        return [Message(ERROR, _("could not trigger %(name)r: %(error)s") % _args(name, exc))]
    found = [Message(WARNING, mismatch)] if mismatch else []
    for claim in published.sent:
        found.append(
            Message(
                SUCCESS,
                _("triggered %(name)r: window %(window)s sent (task id %(task_id)s)")
                % {"name": name, "window": format_window(claim.window), "task_id": claim.task_id},
            )
        )
    found += _unsent_and_failed(published, name)
    if published.already_claimed:
        found.append(
            Message(
                WARNING, _("%(name)r: the window had a row already: nothing sent") % _args(name)
            )
        )
    return found


def backfill_preview(
    app: Any, store: OpenedDjangoStore, namespace: str, name: str, *, start: datetime, end: datetime
) -> tuple[list[tuple[datetime, str | None]], list[Message]]:
    """The windows a backfill of `name` over `[start, end]` covers, each with the status
    of the row it already has (None: it would be sent), and messages to show first.

    Nothing is claimed. Where backfill would refuse the range, no window and the reason.
    """
    from safebeat.contrib.django.models import Dispatch  # noqa: PLC0415 - models need setup

    try:
        entry, mismatch = registered_entry(app, store, namespace, name)
        windows = operations.backfill_windows(store, namespace, entry, start=start, end=end)
    except SafebeatError as exc:
        return [], [Message(ERROR, _("could not backfill %(name)r: %(error)s") % _args(name, exc))]
    rows = Dispatch.objects.using(store.alias).filter(
        namespace=namespace, entry=name, window_at__gte=windows[0], window_at__lte=windows[-1]
    )
    taken = dict(rows.values_list("window_at", "status"))
    return [(w, taken.get(w)) for w in windows], [Message(WARNING, mismatch)] if mismatch else []


def backfill(
    app: Any,
    store: Store,
    namespace: str,
    name: str,
    *,
    start: datetime,
    end: datetime,
    actor: str,
) -> list[Message]:
    """Send the windows of `name` in `[start, end]` that have no row, as `safebeat backfill`
    does, as `actor`."""
    try:
        entry, mismatch = registered_entry(app, store, namespace, name)
        published = operations.backfill(
            app, store, namespace, entry, start=start, end=end, actor=actor
        )
    except SafebeatError as exc:
        return [Message(ERROR, _("could not backfill %(name)r: %(error)s") % _args(name, exc))]
    found = [Message(WARNING, mismatch)] if mismatch else []
    sent = published.sent
    if len(sent) == 1:
        found.append(
            Message(
                SUCCESS,
                _("backfilled %(name)r: window %(window)s sent")
                % {"name": name, "window": format_window(sent[0].window)},
            )
        )
    elif sent:
        found.append(
            Message(
                SUCCESS,
                ngettext(
                    "backfilled %(name)r: %(count)d window sent, %(first)s to %(last)s",
                    "backfilled %(name)r: %(count)d windows sent, %(first)s to %(last)s",
                    len(sent),
                )
                % {
                    "name": name,
                    "count": len(sent),
                    "first": format_window(sent[0].window),
                    "last": format_window(sent[-1].window),
                },
            )
        )
    found += _unsent_and_failed(published, name)
    if published.already_claimed:
        found.append(
            Message(
                WARNING,
                ngettext(
                    "backfilled %(name)r: %(count)d window already had a row; left alone",
                    "backfilled %(name)r: %(count)d windows already had a row; left alone",
                    published.already_claimed,
                )
                % {"name": name, "count": published.already_claimed},
            )
        )
    return found


def _args(name: str, error: object = None) -> dict[str, object]:
    return {"name": name, "error": error}


def _unsent_and_failed(published: operations.Published, name: str) -> Sequence[Message]:
    """Messages for windows claimed but not sent (the broker is down) and ones that failed."""
    found = [
        Message(
            WARNING,
            _(
                "%(name)r: window %(window)s claimed, but the broker is unreachable: a beat "
                "replica sends it after safebeat_claim_timeout"
            )
            % {"name": name, "window": format_window(claim.window)},
        )
        for claim in published.unsent
    ]
    found += [
        Message(
            ERROR,
            _("could not send %(name)r: window %(window)s: %(error)s")
            % {"name": name, "window": window, "error": error},
        )
        for window, error in published.failed.items()
    ]
    return found


def registered_entry(app: Any, store: Store, namespace: str, name: str) -> tuple[Entry, str | None]:
    """The entry `name` beat registered in `namespace`, compiled here (see compiled_entry).

    Raises OperationError if it is not registered, EntryError if it cannot be compiled.
    """
    state = store.states(namespace).get(name)
    if state is None:
        raise operations.OperationError(
            _("it is not registered in namespace %(namespace)r") % {"namespace": namespace}
        )
    return compiled_entry(app, name, state.digest)


def compiled_entry(app: Any, name: str, digest: str) -> tuple[Entry, str | None]:
    """Return the entry `name` as beat runs it, and a warning if beat registered another.

    Raises EntryError if the app does not define it or it does not compile.
    """
    config = config_from_app(app)
    # What DatabaseScheduler does: a row of the name (good or broken) wins over a setting.
    by_preference = [_periodic_task(app, config, name), _beat_schedule(app, config, name)]
    for found in by_preference:
        if isinstance(found, Entry) and found.digest == digest:
            return found, None
    preferred = next((found for found in by_preference if found is not None), None)
    if isinstance(preferred, Entry):
        return preferred, _(
            "%(name)r: the definition compiled here is not the one beat registered "
            "(beat has not read the latest settings or periodic task yet, or runs another "
            "schedule); sent as defined here"
        ) % {"name": name}
    if preferred is not None:
        raise preferred
    raise EntryError(
        name, "neither the Celery app's beat_schedule nor an enabled periodic task defines it"
    )


def _periodic_task(app: Any, config: Config, name: str) -> Entry | EntryError | None:
    """The enabled django-celery-beat row `name`, compiled as DatabaseScheduler does."""
    return periodic_task_schedule(app, config).find(name)


def _beat_schedule(app: Any, config: Config, name: str) -> Entry | EntryError | None:
    """The `beat_schedule` item `name` (or stock beat's own entry), compiled as beat does."""
    return settings_schedule(app, config).find(name)
