"""The admin's forms, made from the table of actions (`safebeat.ops.actions.ACTIONS`): the
entries page's values for its actions (a pause's end, a note, ...), and the range of an
entry's windows to backfill. An instant without an offset is in the current time zone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from safebeat.ops.actions import ACTIONS, Action, Field, Kind


def form_field(field: Field) -> Any:
    """The Django form field of one field of an action."""
    label = _(field.label)  # listed in safebeat.contrib.django.words
    if field.kind is Kind.INSTANT:
        return forms.DateTimeField(label=label, required=field.required)
    if field.kind is Kind.COUNT:
        low, high = field.bounds
        return forms.IntegerField(
            label=label, required=field.required, min_value=low, max_value=high
        )
    return forms.CharField(label=label, required=field.required, max_length=field.longest)


def _instant_hints(form: forms.Form) -> None:
    hint = gettext(
        "ISO 8601, for example 2026-03-01T06:00:00Z; a time without an offset is in %(zone)s."
    ) % {"zone": timezone.get_current_timezone_name()}
    for bound in form.fields.values():
        if isinstance(bound, forms.DateTimeField):
            bound.help_text = hint


class BackfillForm(forms.Form):  # type: ignore[misc]  # Django is untyped here
    """The entry, and the fields of ACTIONS["backfill"]: `start` and `end`, aware instants,
    and the note."""

    namespace = forms.CharField(widget=forms.HiddenInput)
    entry = forms.CharField(widget=forms.HiddenInput)
    action = ACTIONS["backfill"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.action.form_fields:
            self.fields[field.name] = form_field(field)
        _instant_hints(self)

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean()
        start, end = cleaned.get("start"), cleaned.get("end")
        if start is not None and end is not None and start > end:
            raise forms.ValidationError(_("The range ends before it starts: swap From and To."))
        return cleaned

    def values(self) -> dict[str, Any]:
        """The action's values, once the form is valid."""
        return {field.name: self.cleaned_data[field.name] for field in self.action.form_fields}


def _entry_page_fields() -> Iterator[tuple[str, Field]]:
    """Each field the actions run from the entries page take, once, named after the first
    action that takes it (`pause_until`, `pause_note`): a note is one input for every
    action that takes one. An action with a page of its own (backfill) is left out."""
    seen: set[str] = set()
    for action in ACTIONS.values():
        if action.preview is not None:
            continue
        for field in action.form_fields:
            if field.name not in seen:
                seen.add(field.name)
                yield f"{action.name}_{field.name}", field


class PauseForm(forms.Form):  # type: ignore[misc]  # Django is untyped here
    """The values beside the entries page's actions, all optional: a pause's end
    (`pause_until`: the entry resumes by itself there) and a note (`pause_note`, for
    every action that takes one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in _entry_page_fields():
            self.fields[name] = form_field(field)
            self.fields[name].required = False

    def values(self, action: Action) -> dict[str, Any]:
        """The values of `action`'s fields, once the form is valid."""
        names: Mapping[str, str] = {field.name: name for name, field in _entry_page_fields()}
        return {
            field.name: self.cleaned_data.get(names.get(field.name, ""))
            for field in action.form_fields
        }
