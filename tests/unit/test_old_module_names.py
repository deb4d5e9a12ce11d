"""Modules renamed since they were documented keep their old import path as a re-export:
code written from those docs (a store plugin calling `safebeat.urls.redact`, one typed
against `safebeat.stores.base.Store`) keeps importing."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("safebeat.urls", "safebeat.store_urls", ["redact", "read", "backend_of", "SCHEMES"]),
        ("safebeat.stores.base", "safebeat.stores.protocols", ["Store", "TickStore", "NewSkip"]),
        ("safebeat.app_schedule", "safebeat.entries.app_entries", None),
    ],
)
def test_an_old_module_name_re_exports_the_new_modules_names(
    old: str, new: str, names: list[str] | None
) -> None:
    before, after = importlib.import_module(old), importlib.import_module(new)
    public = names or [n for n in vars(after) if not n.startswith("_")]
    assert public
    assert {n: getattr(before, n) for n in public} == {n: getattr(after, n) for n in public}
