"""The wheel users install: its data files, entry points and metadata, built from this tree."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "safebeat"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """safebeat's wheel, built by its build backend (hatchling, from the dev extra)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "--quiet", "--wheel-dir", str(out)],
        check=True,
        timeout=180,
    )  # fmt: skip
    [built] = out.glob("safebeat-*.whl")
    return zipfile.ZipFile(built)


def source_files(*patterns: str) -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for pattern in patterns
        for path in PACKAGE.rglob(pattern)
        if "__pycache__" not in path.parts
    }


def test_wheel_ships_every_data_file_the_code_loads(wheel: zipfile.ZipFile) -> None:
    """py.typed, the SQL and Lua files, Django's migrations, templates, the console's
    stylesheet and compiled catalogs."""
    names = set(wheel.namelist())
    assert "safebeat/py.typed" in names
    expected = source_files("*.sql", "*.lua", "*.html", "*.css", "*.po", "*.mo")
    expected |= source_files("migrations/*.py")
    assert any(name.endswith("/ru/LC_MESSAGES/django.mo") for name in expected)
    assert any(name.endswith(".lua") for name in expected)
    assert expected - names == set()


def test_wheel_declares_celerys_entry_points_classifiers_and_urls(wheel: zipfile.ZipFile) -> None:
    """`celery safebeat` and `-S safebeat` entry points; Django/Celery classifiers; links."""
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    entry_points = wheel.read(info).decode()
    assert "[celery.commands]\nsafebeat = safebeat.celery_command:safebeat" in entry_points
    assert "[celery.beat_schedulers]\nsafebeat = safebeat:Scheduler" in entry_points
    meta = Parser().parsestr(wheel.read(info.replace("entry_points.txt", "METADATA")).decode())
    classifiers = meta.get_all("Classifier") or []
    for classifier in ("Framework :: Celery", "Framework :: Django", "Framework :: Django :: 5.2"):
        assert classifier in classifiers
    urls = dict(url.split(", ", 1) for url in meta.get_all("Project-URL") or [])
    assert set(urls) >= {"Documentation", "Changelog", "Source", "Issues"}
    assert urls["Changelog"].endswith("/CHANGELOG.md")


def test_read_the_docs_builds_the_mkdocs_site_as_strictly_as_make_docs() -> None:
    """.readthedocs.yaml builds mkdocs.yml, failing on warnings, with the `docs` extra."""
    config = yaml.safe_load((ROOT / ".readthedocs.yaml").read_text())
    assert config["version"] == 2
    assert config["mkdocs"] == {"configuration": "mkdocs.yml", "fail_on_warning": True}
    [install] = config["python"]["install"]
    assert (install["method"], install["path"], install["extra_requirements"]) == (
        "pip",
        ".",
        ["docs"],
    )
    extra = re.search(r"^docs = \[(.*)\]", (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra is not None
    assert '"mkdocs-material' in extra.group(1)
    assert "--strict" in (ROOT / "Makefile").read_text()
