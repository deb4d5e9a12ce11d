"""What the admin's entries page does to an entry: pause, resume, trigger now.

The actions are `safebeat.operations`' (the CLI's `pause`, `resume` and `trigger`), on
the `django://` store of the database the page reads. Triggering sends the entry's task
with its arguments and options, which the store does not keep: the entry is compiled
here from the Celery app, as beat compiles it. The candidates are the enabled
django-celery-beat row of that name (what `DatabaseScheduler` runs) and the app's
`beat_schedule` item (with stock beat's own entries). The one whose digest is the
definition beat registered is sent; if neither is, the one `DatabaseScheduler` prefers
(the row) is sent, with a warning that beat has not read it yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages

from safebeat import operations
from safebeat.app_schedule import periodic_task_schedule, settings_schedule
from safebeat.config import Config, config_from_app
from safebeat.entries import Entry
from safebeat.errors import EntryError, SafebeatError
from safebeat.identity import format_window
from safebeat.stores.base import Store

SUCCESS, WARNING, ERROR = messages.SUCCESS, messages.WARNING, messages.ERROR


@dataclass(frozen=True)
class Message:
    """What an action tells the admin user: a level of django.contrib.messages, and text."""

    level: int
    text: str


def set_paused(store: Store, namespace: str, name: str, paused: bool) -> Message:
    """Pause or resume one entry for every replica."""
    try:
        operations.set_paused(store, namespace, name, paused)
    except SafebeatError as exc:
        return Message(ERROR, f"could not {'pause' if paused else 'resume'} {name!r}: {exc}")
    if paused:
        return Message(
            SUCCESS,
            f"paused {name!r} (namespace {namespace!r}): its windows are skipped "
            "(reason paused) until it is resumed",
        )
    return Message(
        SUCCESS,
        f"resumed {name!r} (namespace {namespace!r}): its next window is sent; windows "
        "that passed while it was paused are not",
    )


def trigger(app: Any, store: Store, namespace: str, name: str) -> list[Message]:
    """Send one window of `name` now (see the module docstring for how it is compiled)."""
    try:
        state = store.states(namespace).get(name)
        if state is None:
            return [
                Message(
                    ERROR,
                    f"could not trigger {name!r}: it is not registered in namespace {namespace!r}",
                )
            ]
        entry, mismatch = compiled_entry(app, name, state.digest)
        published = operations.trigger(app, store, namespace, entry)
    except SafebeatError as exc:
        return [Message(ERROR, f"could not trigger {name!r}: {exc}")]
    found: list[Message] = []
    if mismatch:
        found.append(Message(WARNING, mismatch))
    for claim in published.sent:
        found.append(
            Message(
                SUCCESS,
                f"triggered {name!r}: window {format_window(claim.window)} sent "
                f"(task id {claim.task_id})",
            )
        )
    for claim in published.unsent:
        found.append(
            Message(
                WARNING,
                f"triggered {name!r}: window {format_window(claim.window)} claimed, but the "
                "broker is unreachable: a beat replica sends it after safebeat_claim_timeout",
            )
        )
    for window, error in published.failed.items():
        found.append(Message(ERROR, f"could not trigger {name!r}: window {window}: {error}"))
    if published.already_claimed:
        found.append(Message(WARNING, f"{name!r}: the window had a row already: nothing sent"))
    return found


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
        return preferred, (
            f"{name!r}: the definition compiled here is not the one beat registered "
            "(beat has not read the latest settings or periodic task yet, or runs another "
            "schedule); sent as defined here"
        )
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
