"""The operator's actions on one entry, each declared once: pause, resume, trigger, backfill,
skip-next.

`ACTIONS` is the table the three surfaces render and run: the CLI makes a command of each
(`safebeat.cli.operate`), the web console a form on the entry's page and a POST route
(`safebeat.web.routes`, a template `web/templates/actions/<name>.html` each), the Django
admin an action of its entries page (`safebeat.contrib.django.admin`). An `Action` holds
its fields (`Field`: the option, the form field, how the text is read), what it records
in the audit trail (`AuditAction`; the operation records it once it has done its work),
how it runs (`run`, calling `safebeat.ops.operations`, which checks every value against
`safebeat.limits` before anything is stored), and its words: the admin's label, the
console's heading, the CLI's help, and its result.

Every action returns a `Result`: a subject (`triggered 'report'`), a summary line and a
line per window worth naming (each window when there are several, and every window not
sent). Its texts are gettext message ids with `%(name)s` arguments: the CLI and the
console show them in English, the admin translates them (every text of this module is
listed for `makemessages` in `safebeat.contrib.django.words`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from safebeat.display import parse_instant
from safebeat.entries import Entry
from safebeat.identity import format_window
from safebeat.limits import NOTE_CHARS
from safebeat.ops import operations
from safebeat.ops.results import ENGLISH, Level, Result, Said, Words
from safebeat.records import AuditAction, Pause
from safebeat.stores.protocols import Store

# What a result says lives in `safebeat.ops.results`; its names stay importable here.
__all__ = [
    "ACTIONS",
    "ENGLISH",
    "NOTE",
    "Action",
    "BadField",
    "Field",
    "Kind",
    "Level",
    "Preview",
    "Result",
    "Run",
    "Said",
    "Target",
    "Words",
    "published",
]


class Kind(enum.Enum):
    """What a field holds: free text (a note), an instant (ISO 8601 with a zone), a count."""

    TEXT = "text"
    INSTANT = "instant"
    COUNT = "count"


@dataclass(frozen=True)
class Field:
    """A value an action takes: `name` is its form field and its key in the values, `option`
    the CLI's (`--until`), `longest` the most characters the console reads."""

    name: str
    option: str
    help: str
    kind: Kind = Kind.TEXT
    #: The admin's label of its input.
    label: str = ""
    required: bool = False
    metavar: str | None = None
    #: A COUNT's default and bounds; only the CLI asks for it.
    default: int | None = None
    bounds: tuple[int, int] = (1, 100_000)
    cli_only: bool = False
    longest: int = 64

    def read(self, text: str | None) -> Any:
        """The value of `text` as typed (stripped); None when empty. Raise ValueError
        (BadInstant for an instant) for text this field cannot hold."""
        text = (text or "").strip()
        if not text and not self.required:
            return self.default
        if self.kind is Kind.INSTANT:
            return parse_instant(text)
        if self.kind is Kind.COUNT:
            return int(text)
        if not text:
            raise ValueError("is required")
        return text


NOTE = Field(
    "note",
    "--note",
    "Why, for the audit trail (`safebeat audit`).",
    label="Note",
    metavar="TEXT",
    longest=NOTE_CHARS,
)


@dataclass(frozen=True)
class Target:
    """The entry an action acts on, who acts, and what the surface gives it: the Celery
    app and how it compiles the entry (to publish), and its names for the fields."""

    store: Store
    namespace: str
    name: str
    actor: str
    app: Any = None
    compile: Callable[[], Entry] | None = None
    fields: operations.Fields = operations.CLI_FIELDS

    def entry(self) -> Entry:
        """The entry as beat runs it, to publish."""
        if self.compile is None:
            raise operations.OperationError("publishing the task needs the Celery app")
        return self.compile()

    @property
    def args(self) -> dict[str, object]:
        return {"name": self.name, "namespace": self.namespace}


Run = Callable[[Target, Mapping[str, Any]], Result]
Preview = Callable[[Target, Mapping[str, Any]], list[datetime]]


@dataclass(frozen=True)
class Action:
    """One operator action on one entry, as every surface shows and runs it."""

    name: str
    #: The admin's label for it in the entries page's action menu.
    label: str
    #: The console's heading of its form, and of the page of what it did (`Triggered x`).
    title: str
    done_title: str
    #: The CLI command's help (its first line is the summary).
    help: str
    fields: tuple[Field, ...]
    audit: AuditAction
    run: Run
    #: How the admin says it refused: `could not pause %(name)r: %(error)s`.
    refused: str
    #: Whether it publishes the task (needs the Celery app: -A).
    publishes: bool = False
    #: Why it needs the Celery app though it does not publish (see `needs_app`), or None.
    uses_app: str | None = None
    #: The windows it would cover, shown for confirmation first (console, admin).
    preview: Preview | None = None
    #: Whether the console's entry page offers it, given whether the entry is paused.
    offered: Callable[[bool], bool] = lambda paused: True
    #: For an action the console answers by going back to the entry's page: the `done`
    #: key of that page's message, from the values, and the message of each key.
    done: Callable[[Mapping[str, Any]], str] | None = None
    done_words: Mapping[str, str] = field(default_factory=dict)

    @property
    def needs_app(self) -> str | None:
        """Why it needs the Celery app (-A), or None: it publishes, or it compiles the entry."""
        return "publishes the task" if self.publishes else self.uses_app

    @property
    def form_fields(self) -> tuple[Field, ...]:
        """The fields the console and the admin take (the CLI takes them all)."""
        return tuple(f for f in self.fields if not f.cli_only)

    def values(self, typed: Mapping[str, str | None]) -> dict[str, Any]:
        """Each field's value from the text typed; raise BadField naming the field."""
        found: dict[str, Any] = {}
        for one in self.fields:
            try:
                found[one.name] = one.read(typed.get(one.name))
            except ValueError as exc:  # BadInstant too
                raise BadField(one, exc) from None
        return found


class BadField(ValueError):
    """A field's text could not be read: `field`, and why (`error`)."""

    def __init__(self, field: Field, error: ValueError) -> None:
        super().__init__(str(error))
        self.field = field
        self.error = error


# --- the results --------------------------------------------------------------------------


def published(subject: Said, found: operations.Published) -> Result:
    """The one presentation of what a trigger or a backfill claimed and published."""
    sent = found.sent
    lines: list[Said] = []
    if len(sent) == 1:
        summary = _sent(sent[0])
    elif sent:
        first, last = format_window(sent[0].window), format_window(sent[-1].window)
        summary = Said(
            Level.OK,
            "%(count)d window sent, %(first)s to %(last)s",
            {"count": len(sent), "first": first, "last": last},
            plural="%(count)d windows sent, %(first)s to %(last)s",
            count=len(sent),
        )
        lines += [_sent(claim) for claim in sent]
    else:
        summary = Said(Level.WARNING, "nothing sent")
    lines += [
        Said(
            Level.WARNING,
            "window %(window)s claimed, but the broker is unreachable: a beat replica "
            "sends it after safebeat_claim_timeout",
            {"window": format_window(claim.window)},
        )
        for claim in found.unsent
    ]
    lines += [
        Said(
            Level.ERROR,
            "window %(window)s could not be sent: %(error)s",
            {"window": window, "error": error},
        )
        for window, error in found.failed.items()
    ]
    if found.already_claimed:
        lines.append(
            Said(
                Level.WARNING,
                "%(count)d window already had a row; left alone",
                {"count": found.already_claimed},
                plural="%(count)d windows already had a row; left alone",
                count=found.already_claimed,
            )
        )
    return Result(subject, summary, lines)


def _sent(claim: Any) -> Said:
    return Said(
        Level.OK,
        "window %(window)s sent (task id %(task_id)s)",
        {"window": format_window(claim.window), "task_id": claim.task_id},
    )


# --- the actions ----------------------------------------------------------------------------


def _pause(target: Target, values: Mapping[str, Any]) -> Result:
    pause = Pause(True, values.get("until"), values.get("note"))
    operations.pause_entry(
        target.store, target.namespace, target.name, pause, actor=target.actor, fields=target.fields
    )
    if pause.until is None:
        return Result(
            Said(Level.OK, "paused %(name)r (namespace %(namespace)r)", target.args),
            Said(Level.OK, "every replica skips its windows (reason paused) until it is resumed"),
        )
    return Result(
        Said(
            Level.OK,
            "paused %(name)r (namespace %(namespace)r) until %(until)s, then resumes by itself",
            {**target.args, "until": format_window(pause.until)},
        ),
        Said(Level.OK, "every replica skips its windows before then (reason paused)"),
    )


def _resume(target: Target, values: Mapping[str, Any]) -> Result:
    pause = Pause(False, note=values.get("note"))
    operations.pause_entry(
        target.store, target.namespace, target.name, pause, actor=target.actor, fields=target.fields
    )
    return Result(
        Said(Level.OK, "resumed %(name)r (namespace %(namespace)r)", target.args),
        Said(Level.OK, "its next window is sent; windows that passed while it was paused are not"),
    )


def _trigger(target: Target, values: Mapping[str, Any]) -> Result:
    entry = target.entry()
    found = operations.trigger(
        target.app,
        target.store,
        target.namespace,
        entry,
        actor=target.actor,
        note=values.get("note"),
    )
    return published(Said(Level.OK, "triggered %(name)r", target.args), found)


def _backfill(target: Target, values: Mapping[str, Any]) -> Result:
    entry = target.entry()
    found = operations.backfill(
        target.app,
        target.store,
        target.namespace,
        entry,
        start=values["start"],
        end=values["end"],
        limit=values.get("limit") or operations.BACKFILL_LIMIT,
        actor=target.actor,
        note=values.get("note"),
        fields=target.fields,
    )
    return published(Said(Level.OK, "backfilled %(name)r", target.args), found)


def _backfill_preview(target: Target, values: Mapping[str, Any]) -> list[datetime]:
    return operations.backfill_windows(
        target.store,
        target.namespace,
        target.entry(),
        start=values["start"],
        end=values["end"],
        limit=values.get("limit") or operations.BACKFILL_LIMIT,
        fields=target.fields,
    )


def _skip_next(target: Target, values: Mapping[str, Any]) -> Result:
    entry, note = target.entry(), values.get("note")
    window = operations.skip_next(
        target.store, target.namespace, entry, actor=target.actor, note=note
    )
    return Result(
        Said(Level.OK, "skipped the next window of %(name)r", target.args),
        Said(
            Level.OK,
            "window %(window)s is recorded as skipped (reason operator)",
            {"window": format_window(window)},
        ),
    )


_UNTIL = Field(
    "until",
    "--until",
    "End the pause by itself at this instant (ISO 8601, with zone).",
    Kind.INSTANT,
    label="Paused until",
    metavar="ISO",
)

ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (
        Action(
            name="pause",
            label="Pause selected entries",
            title="Pause",
            done_title="Paused",
            help="Pause ENTRY for every replica: its windows are skipped (reason `paused`) "
            "until resumed, or with --until until that instant, when every replica resumes "
            "it by itself.",
            fields=(_UNTIL, NOTE),
            audit=AuditAction.PAUSE,
            run=_pause,
            refused="could not pause %(name)r: %(error)s",
            offered=lambda paused: not paused,
            done=lambda values: "paused" if values.get("until") is None else "paused-until",
            done_words={
                "paused": "Paused: every replica skips its windows until resumed.",
                "paused-until": "Paused: every replica skips its windows until the pause ends.",
            },
        ),
        Action(
            name="resume",
            label="Resume selected entries",
            title="Resume",
            done_title="Resumed",
            help="Resume ENTRY: its next window is dispatched; windows that passed while "
            "paused are not.",
            fields=(NOTE,),
            audit=AuditAction.RESUME,
            run=_resume,
            refused="could not resume %(name)r: %(error)s",
            offered=lambda paused: paused,
            done=lambda values: "resumed",
            done_words={"resumed": "Resumed."},
        ),
        Action(
            name="trigger",
            label="Trigger selected entries now",
            title="Run once now",
            done_title="Triggered",
            help="Run ENTRY once now, outside its schedule (recorded with reason `trigger`). "
            "Needs -A.",
            fields=(NOTE,),
            audit=AuditAction.TRIGGER,
            run=_trigger,
            refused="could not trigger %(name)r: %(error)s",
            publishes=True,
        ),
        Action(
            name="backfill",
            label="Backfill the selected entry...",
            title="Backfill missed windows",
            done_title="Backfilled",
            help="Dispatch ENTRY's windows between --from and --to that were never sent. "
            "Needs -A.\n\nWindows already sent, skipped or claimed are left alone; each new "
            "one is recorded with reason `backfill` and keeps its own window (and task id).",
            fields=(
                Field(
                    "start",
                    "--from",
                    "First instant (ISO 8601, with zone).",
                    Kind.INSTANT,
                    label="From",
                    required=True,
                ),
                Field(
                    "end",
                    "--to",
                    "Last instant (ISO 8601, with zone).",
                    Kind.INSTANT,
                    label="To",
                    required=True,
                ),
                Field(
                    "limit",
                    "--limit",
                    "Refuse ranges with more windows than this.",
                    Kind.COUNT,
                    default=operations.BACKFILL_LIMIT,
                    cli_only=True,
                ),
                NOTE,
            ),
            audit=AuditAction.BACKFILL,
            run=_backfill,
            refused="could not backfill %(name)r: %(error)s",
            publishes=True,
            preview=_backfill_preview,
        ),
        Action(
            name="skip-next",
            label="Skip the next window of selected entries",
            title="Skip the next window",
            done_title="Skipped",
            help="Skip ENTRY's next window (the one `status` shows): it is recorded as skipped "
            "(reason `operator`), not sent; the later ones are sent as usual. Needs -A.",
            fields=(NOTE,),
            audit=AuditAction.SKIP,
            run=_skip_next,
            refused="could not skip the next window of %(name)r: %(error)s",
            uses_app="computes the entry's next window",
            offered=lambda paused: not paused,
        ),
    )
}
