"""docs/development.md's "Where things live" names every module it lists file by file:
those directly in safebeat/ and in safebeat/beat/ (the other packages are summed up)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_map() -> str:
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    return page.split("## Where things live", 1)[1].split("```", 2)[1]


def test_every_module_of_safebeat_and_beat_is_in_the_module_map() -> None:
    named = set(re.findall(r"[a-z_]+\.py", _module_map()))
    modules = [*(ROOT / "safebeat").glob("*.py"), *(ROOT / "safebeat" / "beat").glob("*.py")]
    missing = sorted(str(m.relative_to(ROOT)) for m in modules if m.name not in named)
    assert missing == []


def test_the_module_map_names_no_module_gone_from_the_tree() -> None:
    named = set(re.findall(r"[a-z_]+\.py", _module_map()))
    present = {p.name for p in ROOT.glob("safebeat/**/*.py")} | {"noxfile.py"}
    assert sorted(named - present) == []
