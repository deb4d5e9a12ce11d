"""Admin pages: the dispatch history, the entries' shared state, the live replicas.

Everything here is read-only. Deleting a dispatch row would free its window's unique
key, so a replica could claim the window again: the history cannot be edited or deleted
from the admin (beat prunes it after `safebeat_retention`). Pausing an entry and
triggering a window by hand are not part of safebeat's store yet; for django-celery-beat
rows, `enabled` pauses a row and its admin's "Run selected tasks" runs one now.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone

from safebeat.contrib.django.models import Dispatch, Entry, Replica

#: A replica whose last heartbeat is older than this is shown as gone.
LIVE_WITHIN = timedelta(seconds=30)


@admin.register(Dispatch)
class DispatchAdmin(admin.ModelAdmin):  # type: ignore[misc]  # Django is untyped here
    """The dispatch history: one row per claimed or skipped window."""

    change_list_template = "safebeat/dispatch_change_list.html"
    list_display = (
        "entry",
        "window_at",
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a deleted row would let its window be claimed again

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("entries/", view(self.entries_view), name="safebeat_entries"),
            path("replicas/", view(self.replicas_view), name="safebeat_replicas"),
            *super().get_urls(),
        ]

    def entries_view(self, request: HttpRequest) -> HttpResponse:
        """Each entry's shared state and its latest window, and periodic tasks that are broken."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        latest = Dispatch.objects.filter(
            namespace=OuterRef("namespace"), entry=OuterRef("name")
        ).order_by("-window_at")
        entries = (
            Entry.objects.order_by("namespace", "name")
            .annotate(
                latest_status=Subquery(latest.values("status")[:1]),
                latest_host=Subquery(latest.values("host")[:1]),
                latest_outcome=Subquery(latest.values("outcome")[:1]),
            )
            .values()
        )
        context = {
            **self.admin_site.each_context(request),
            "title": "safebeat entries",
            "entries": list(entries),
            "problems": periodic_task_problems(),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "safebeat/entries.html", context)

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
            "title": "safebeat replicas",
            "replicas": replicas,
            "live_within": int(LIVE_WITHIN.total_seconds()),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "safebeat/replicas.html", context)


def periodic_task_problems() -> list[tuple[str, str]]:
    """(row name, problem) of every enabled django-celery-beat row beat would leave out."""
    from django.apps import apps  # noqa: PLC0415

    if not apps.is_installed("django_celery_beat"):
        return []
    from celery import current_app  # noqa: PLC0415

    from safebeat.config import config_from_app  # noqa: PLC0415
    from safebeat.contrib.django.source import PeriodicTaskSource, host_now  # noqa: PLC0415

    app = current_app._get_current_object()
    app.loader.import_default_modules()  # register the project's tasks, as beat does
    rows = PeriodicTaskSource(app, config_from_app(app), host_now).load()
    return sorted((row.name, row.error.problem) for row in rows if row.error is not None)
