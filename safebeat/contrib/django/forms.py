"""The admin's forms: the range of an entry's windows to backfill, with its time zone, and
a pause's optional end and note."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _


class BackfillForm(forms.Form):  # type: ignore[misc]  # Django is untyped here
    """`start` and `end`, aware instants; a time without an offset is in the current zone."""

    namespace = forms.CharField(widget=forms.HiddenInput)
    entry = forms.CharField(widget=forms.HiddenInput)
    start = forms.DateTimeField(label=_("From"))
    end = forms.DateTimeField(label=_("To"))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        hint = gettext(
            "ISO 8601, for example 2026-03-01T06:00:00Z; a time without an offset is in %(zone)s."
        ) % {"zone": timezone.get_current_timezone_name()}
        self.fields["start"].help_text = hint
        self.fields["end"].help_text = hint

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        if start is not None and end is not None and start > end:
            raise forms.ValidationError(_("The range ends before it starts: swap From and To."))
        return cleaned


class PauseForm(forms.Form):  # type: ignore[misc]  # Django is untyped here
    """A pause's optional end (`pause_until`: the entry resumes by itself there; a time
    without an offset is in the current zone) and note, beside the entries' actions."""

    pause_until = forms.DateTimeField(label=_("Paused until"), required=False)
    pause_note = forms.CharField(label=_("Note"), required=False, max_length=500)
