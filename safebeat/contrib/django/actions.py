"""What the admin's entries page does to an entry: pause, resume, trigger now, backfill.

Each is recorded in the store's audit trail under the admin user's name.

The actions are the table `safebeat.ops.actions.ACTIONS` (the CLI's `pause`, `resume`,
`trigger` and `backfill`), run by `run` on the `django://` store of the database the page
reads, their results said in the request's language (`safebeat.contrib.django.words`).
Triggering and backfilling send the entry's task with its arguments and options, which
the store does not keep: the entry is compiled here from the Celery app, as beat compiles
it. The candidates are the enabled django-celery-beat row of that name (what `DatabaseScheduler`
runs) and the app's `beat_schedule` item (with stock beat's own entries). The one whose
digest is the definition beat registered is sent; if neither is, the one
`DatabaseScheduler` prefers (the row) is sent, with a warning that beat has not read it
yet. Messages are translated (`gettext`) into the language of the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.utils import translation
from django.utils.translation import gettext as _

from safebeat.config import Config, config_from_app
from safebeat.entries import Entry
from safebeat.entries.app_entries import periodic_task_schedule, settings_schedule
from safebeat.errors import EntryError, SafebeatError
from safebeat.ops import operations
from safebeat.ops.actions import Action, Level, Target
from safebeat.stores.protocols import Store

if TYPE_CHECKING:
    from safebeat.stores.django.base import OpenedDjangoStore

SUCCESS, WARNING, ERROR = messages.SUCCESS, messages.WARNING, messages.ERROR
_LEVELS = {Level.OK: SUCCESS, Level.WARNING: WARNING, Level.ERROR: ERROR}


@dataclass(frozen=True)
class Message:
    """What an action tells the admin user: a level of django.contrib.messages, and text."""

    level: int
    text: str


def run(
    action: Action,
    app: Any,
    store: Store,
    namespace: str,
    name: str,
    *,
    actor: str,
    values: Mapping[str, Any],
) -> list[Message]:
    """Run `action` (of `safebeat.ops.actions.ACTIONS`) on one entry as `actor` (the admin
    user's name, for the audit trail); say what it did, in the request's language."""
    mismatches: list[str] = []

    def compile_entry() -> Entry:
        entry, mismatch = registered_entry(app, store, namespace, name)
        mismatches.extend([mismatch] if mismatch else [])
        return entry

    target = Target(store, namespace, name, actor, app=app, compile=compile_entry)
    try:
        result = action.run(target, values)
    except SafebeatError as exc:
        return [Message(ERROR, _(action.refused) % _args(name, exc))]
    said = result.said(django_words)
    # The summary, then what went wrong: each window sent is named by the history.
    shown = [said[0], *(line for line in said[1:] if line[0] is not Level.OK)]
    return [Message(WARNING, m) for m in mismatches] + [
        Message(_LEVELS[level], text) for level, text in shown
    ]


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


class _DjangoWords:
    """The request's language: `safebeat.ops.actions.Words` over Django's translation."""

    def gettext(self, message: str, /) -> str:
        return str(translation.gettext(message))

    def ngettext(self, singular: str, plural: str, n: int, /) -> str:
        return str(translation.ngettext(singular, plural, n))


django_words = _DjangoWords()


def _args(name: str, error: object = None) -> dict[str, object]:
    return {"name": name, "error": error}


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
