"""Admin pages: the dispatch history, the entries' shared state, the live replicas.

The history is read-only. Deleting a dispatch row would free its window's unique key, so
a replica could claim the window again: the history cannot be edited or deleted from the
admin (beat prunes it after `safebeat_retention`). The entries page has four actions,
for users with the "Can change entry" permission: pause, resume (for every replica),
trigger now (one window sent from the web process) and backfill (a form for a range, a
preview of its windows, then the ones without a row sent; see
`safebeat.contrib.django.actions`); a pause may carry an end (the entry resumes by itself
there) and a note. Every action is recorded in the store's audit trail under the admin
user's name, shown read-only under "Operator actions". Every label and message is
translatable.
"""

from __future__ import annotations

import json
from datetime import datetime, tzinfo
from datetime import timezone as dt_timezone
from typing import Any
from urllib.parse import urlencode

from celery import current_app
from celery.local import Proxy
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import router, transaction
from django.db.models import OuterRef, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from safebeat import liveness
from safebeat.contrib.django import actions
from safebeat.contrib.django.forms import BackfillForm, PauseForm
from safebeat.contrib.django.models import Audit, Dispatch, Entry, Replica
from safebeat.entries import zone_of
from safebeat.errors import UnreadableState
from safebeat.identity import format_window
from safebeat.ops.actions import ACTIONS

#: A replica whose last heartbeat is older than this is shown as gone (safebeat.liveness).
LIVE_WITHIN = liveness.LIVE_WITHIN
#: The entries page's actions (`safebeat.ops.actions.ACTIONS`): form value -> label.
ENTRY_ACTIONS = {name: _(action.label) for name, action in ACTIONS.items()}


@admin.register(Dispatch)
class DispatchAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django is untyped here
    """The dispatch history: one row per claimed or skipped window."""

    change_list_template = "safebeat/dispatch_change_list.html"
    list_display = (
        "entry",
        "window_utc",
        "window_in_zone",
        "status",
        "outcome",
        "host",
        "pid",
        "claimed_at",
        "sent_at",
        "started_at",
        "finished_at",
        "attempts",
        "duplicates",
    )
    list_filter = ("namespace", "status", "outcome", "entry", "host", "replica")
    date_hierarchy = "window_at"
    search_fields = ("entry", "task_id", "replica", "worker")
    ordering = ("-window_at", "-id")
    readonly_fields = tuple(field.name for field in Dispatch._meta.fields)
    #: The Celery app that triggered windows are sent with: the current app, which
    #: Celery's Django fixup makes the default of every thread (as django-celery-beat's
    #: admin uses it). Set it to your app in a subclass to choose another.
    celery_app: Any = current_app

    def get_queryset(self, request: HttpRequest) -> Any:
        """The rows, each with its entry's schedule text (which names a crontab's zone)."""
        schedule = Entry.objects.filter(
            namespace=OuterRef("namespace"), name=OuterRef("entry")
        ).values("schedule")[:1]
        return super().get_queryset(request).annotate(entry_schedule=Subquery(schedule))

    @admin.display(description=_("window (UTC)"), ordering="window_at")  # type: ignore[untyped-decorator]  # Django is untyped here
    def window_utc(self, dispatch: Dispatch) -> str:
        """The window to the second (and its fraction, where it has one), in UTC."""
        return window_text(dispatch.window_at, dt_timezone.utc)

    @admin.display(description=_("window (entry's zone)"), ordering="window_at")  # type: ignore[untyped-decorator]  # Django is untyped here
    def window_in_zone(self, dispatch: Dispatch) -> str:
        """The window in its crontab's zone; UTC for entries without one (intervals,
        solar, one-off), whose windows are instants."""
        zone = zone_of(getattr(dispatch, "entry_schedule", None) or "")
        return window_text(dispatch.window_at, zone or dt_timezone.utc)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a deleted row would let its window be claimed again

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("entries/", _not_atomic(view(self.entries_view)), name="safebeat_entries"),
            path(
                "entries/backfill/",
                _not_atomic(view(self.backfill_view)),
                name="safebeat_backfill",
            ),
            path("replicas/", view(self.replicas_view), name="safebeat_replicas"),
            *super().get_urls(),
        ]

    def entries_view(self, request: HttpRequest) -> HttpResponse:
        """Each entry's shared state and its latest window, and periodic tasks that are broken.

        A POST runs one of ENTRY_ACTIONS on the selected entries, then shows the page again.
        """
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            return self.entry_action(request)
        rows = self._entry_rows(timezone.now())
        context = {
            **self.admin_site.each_context(request),
            "title": _("safebeat entries"),
            "entries": rows,
            "unreadable": [row for row in rows if row["unreadable"]],
            "pause_form": PauseForm(),
            "problems": periodic_task_problems(self.get_celery_app()),
            "entry_actions": ENTRY_ACTIONS if self.has_entry_action_permission(request) else {},
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "safebeat/entries.html", context)

    def _entry_rows(self, now: datetime) -> list[dict[str, Any]]:
        """A row per entry, its state as the store reads it back: one the store cannot
        read (a pause end past the year 9999, a zero date) is listed with its problem as
        put aside, as `safebeat status` lists it, and the page still answers."""
        from safebeat.stores.django import open_django_store  # noqa: PLC0415

        latest = Dispatch.objects.filter(
            namespace=OuterRef("namespace"), entry=OuterRef("name")
        ).order_by("-window_at")
        # Only the columns that are text: the instants come from the store, which reads
        # each row on its own (the ORM fails the whole page on one it cannot convert).
        found = (
            Entry.objects.order_by("namespace", "name")
            .annotate(
                latest_status=Subquery(latest.values("status")[:1]),
                latest_host=Subquery(latest.values("host")[:1]),
                latest_outcome=Subquery(latest.values("outcome")[:1]),
            )
            .values("namespace", "name", "latest_status", "latest_host", "latest_outcome")
        )
        store = open_django_store(f"django://{router.db_for_write(Entry)}")
        states: dict[str, dict[str, Any]] = {}
        rows = []
        for row in found:
            namespace = row["namespace"]
            if namespace not in states:
                states[namespace] = store.states(namespace)
            state = states[namespace].get(row["name"])
            if state is None:  # deleted since the query above
                continue
            unreadable = state.unreadable
            rows.append(
                {
                    **row,
                    "key": json.dumps([namespace, row["name"]]),
                    "schedule": state.schedule,
                    "unreadable": unreadable,
                    "problem": None
                    if unreadable is None
                    else UnreadableState(row["name"], unreadable).problem,
                    "last_window": None if unreadable else state.last_window,
                    "defined_at": None if unreadable else state.defined_at,
                    "anchor": None if unreadable else state.anchor,
                    "paused_until": state.paused_until,
                    "pause_note": state.pause_note,
                    # A pause whose end passed is over: every replica dispatches again.
                    "paused_now": unreadable is None and state.paused_at(now),
                }
            )
        return rows

    def has_entry_action_permission(self, request: HttpRequest) -> bool:
        """Whether the user may pause, resume and trigger entries ("Can change entry")."""
        opts = Entry._meta
        return bool(request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}"))

    def entry_action(self, request: HttpRequest) -> HttpResponse:
        """Run the posted action on the selected entries; say what happened to each."""
        if not self.has_entry_action_permission(request):
            raise PermissionDenied
        page = HttpResponseRedirect(self._url("safebeat_entries"))
        action = request.POST.get("action", "")
        selected = _selected(request.POST.getlist("entry"))
        if action not in ENTRY_ACTIONS:
            messages.warning(request, _("Choose an action for the selected entries."))
            return page
        if not selected:
            messages.warning(request, _("Select the entries to act on: no entry was changed."))
            return page
        if ACTIONS[action].preview is not None:  # its own page: a range, then its windows
            if len(selected) != 1:
                messages.warning(request, _("Select one entry to backfill."))
                return page
            namespace, name = selected[0]
            query = urlencode({"namespace": namespace, "entry": name})
            return HttpResponseRedirect(f"{self._url('safebeat_backfill')}?{query}")
        pause = PauseForm(request.POST)
        if not pause.is_valid():
            for field, errors in pause.errors.items():
                label = pause.fields[field].label if field in pause.fields else field
                messages.error(request, f"{label}: {' '.join(errors)}")
            return page
        actor = request.user.get_username()
        values = pause.values(ACTIONS[action])
        found = self.run_entry_action(action, selected, actor=actor, **values)
        for message in found:
            messages.add_message(request, message.level, message.text)
        return page

    def run_entry_action(
        self, action: str, selected: list[tuple[str, str]], *, actor: str, **values: Any
    ) -> list[actions.Message]:
        """Run ACTIONS[`action`] on each selected (namespace, entry) as `actor`, with the
        values of its fields (a pause's `until`, a `note`); return the messages."""
        from safebeat.stores.django import open_django_store  # noqa: PLC0415

        # The database this page reads the entries from is the one the actions write to.
        store = open_django_store(f"django://{router.db_for_write(Entry)}")
        app = self.get_celery_app() if ACTIONS[action].needs_app else None
        found: list[actions.Message] = []
        for namespace, name in selected:
            found += actions.run(
                ACTIONS[action], app, store, namespace, name, actor=actor, values=values
            )
        return found

    def backfill_view(self, request: HttpRequest) -> HttpResponse:
        """A form for the range of one entry's windows to backfill; "Preview" lists the
        windows (each new or already with a row), "Send" runs `safebeat backfill` on them."""
        if not self.has_entry_action_permission(request):
            raise PermissionDenied
        from safebeat.stores.django import open_django_store  # noqa: PLC0415

        form = BackfillForm(request.POST if request.method == "POST" else None, initial=request.GET)
        preview: list[tuple[Any, str | None]] = []
        if form.is_valid():
            app, data = self.get_celery_app(), form.cleaned_data
            store = open_django_store(f"django://{router.db_for_write(Entry)}")
            namespace, name = data["namespace"], data["entry"]
            values = form.values()
            span = {"start": values["start"], "end": values["end"]}
            if "send" in request.POST:
                actor = request.user.get_username()
                said = actions.run(
                    form.action, app, store, namespace, name, actor=actor, values=values
                )
                for message in said:
                    messages.add_message(request, message.level, message.text)
                return HttpResponseRedirect(self._url("safebeat_entries"))
            preview, notes = actions.backfill_preview(app, store, namespace, name, **span)
            for message in notes:
                messages.add_message(request, message.level, message.text)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Backfill %(entry)s") % {"entry": form["entry"].value() or ""},
            "form": form,
            "namespace": form["namespace"].value(),
            "entry": form["entry"].value(),
            "preview": [{"window": format_window(w), "status": s} for w, s in preview],
            "to_send": sum(status is None for _window, status in preview),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "safebeat/backfill.html", context)

    def _url(self, name: str) -> str:
        return str(reverse(f"{self.admin_site.name}:{name}"))

    def get_celery_app(self) -> Any:
        """The Celery app (`celery_app`), itself rather than a proxy of the current one."""
        app = self.celery_app
        return app._get_current_object() if isinstance(app, Proxy) else app

    def replicas_view(self, request: HttpRequest) -> HttpResponse:
        """Every replica's last heartbeat, the live ones first."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        live_after = timezone.now() - LIVE_WITHIN
        replicas = [
            {**row, "live": row["heartbeat_at"] >= live_after, "entries": len(row["definitions"])}
            for row in Replica.objects.order_by("-heartbeat_at").values()
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": _("safebeat replicas"),
            "replicas": replicas,
            "live_within": int(LIVE_WITHIN.total_seconds()),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "safebeat/replicas.html", context)


@admin.register(Audit)
class AuditAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django is untyped here
    """The audit trail: who paused, resumed, triggered, backfilled, pruned or migrated,
    when (store time), on which entry and windows, with the note. Read-only: a trail that
    could be edited from the page it is shown on would prove nothing."""

    list_display = ("at", "actor", "action", "namespace", "entry", "window_list", "note")
    list_filter = ("namespace", "action", "actor")
    search_fields = ("entry", "actor", "note")
    ordering = ("-id",)
    readonly_fields = tuple(field.name for field in Audit._meta.fields)

    @admin.display(description=_("windows"))  # type: ignore[untyped-decorator]  # Django is untyped here
    def window_list(self, audit: Audit) -> str:
        """The windows the action named (up to three, then how many more), in UTC."""
        listed = [datetime.fromisoformat(w) for w in audit.windows or []]
        shown = ", ".join(window_text(w, dt_timezone.utc) for w in listed[:3])
        more = len(listed) - 3
        return f"{shown} (+{more})" if more > 0 else (shown or "-")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # beat prunes it after safebeat_retention


def window_text(instant: datetime, zone: tzinfo) -> str:
    """`instant` in `zone` to the second, with its fraction where it has one, and the zone:
    three windows 5 s apart must never read alike (`2026-03-01 14:11:05.25 UTC`)."""
    local = instant.astimezone(zone)
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if local.microsecond:
        text += f".{local.microsecond:06d}".rstrip("0")
    key = getattr(zone, "key", None)
    if zone is dt_timezone.utc or key in ("UTC", "Etc/UTC"):
        return f"{text} UTC"
    return f"{text} {key or local.tzname()} ({local:%z})"


def _not_atomic(view: Any) -> Any:
    """Exempt `view` from ATOMIC_REQUESTS on every database: a triggered window's claim must
    be committed before its message is published, as beat's are (a worker that receives
    it looks its row up), so the store commits it on its own."""
    from django.conf import settings  # noqa: PLC0415

    for alias in settings.DATABASES:
        view = transaction.non_atomic_requests(using=alias)(view)
    return view


def _selected(values: list[str]) -> list[tuple[str, str]]:
    """The (namespace, entry) pairs of the checked boxes, in order, each once."""
    selected: dict[tuple[str, str], None] = {}
    for value in values:
        try:
            namespace, name = json.loads(value)
        except (ValueError, TypeError):
            continue  # not a value the page wrote
        if isinstance(namespace, str) and isinstance(name, str):
            selected[namespace, name] = None
    return list(selected)


def periodic_task_problems(app: Any) -> list[tuple[str, str]]:
    """(row name, problem) of every enabled django-celery-beat row beat would leave out."""
    from safebeat.config import config_from_app  # noqa: PLC0415
    from safebeat.entries.app_entries import periodic_task_schedule  # noqa: PLC0415

    broken = periodic_task_schedule(app, config_from_app(app)).broken
    return sorted((name, error.problem) for name, error in broken.items())
