"""The docs that list what exists are checked against what exists: every command in the
CLI reference, the README and the docs' home page; every page in the home page's guide;
the demo's sample output the same wherever it is shown, with the legend the demo prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from safebeat.cli.group import command_names

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
INDEX = (ROOT / "docs" / "index.md").read_text()


def _bullet(text: str, start: str) -> str:
    """The list item of `text` that starts with `start`, up to the next item or heading."""
    at = text.index(start)
    end = re.search(r"\n(- |#)", text[at + 1 :])
    return text[at : at + 1 + end.start()] if end else text[at:]


def _nav_pages() -> list[str]:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return [page for item in nav for page in item.values()]


@pytest.mark.parametrize("command", command_names())
def test_every_command_has_its_section_in_the_cli_reference(command: str) -> None:
    assert f"\n## safebeat {command}\n" in (ROOT / "docs" / "cli.md").read_text()


@pytest.mark.parametrize("command", command_names())
def test_the_readme_and_the_home_page_name_every_command(command: str) -> None:
    readme = _bullet(README, "- [Command line](docs/cli.md)")
    home = _bullet(INDEX, "- [Command line](cli.md)")
    named = re.compile(rf"`(safebeat )?{command}`")
    assert named.search(readme), f"README's command line list misses {command}"
    assert named.search(home), f"docs/index.md's command line list misses {command}"


def test_the_home_page_leads_to_every_page() -> None:
    """docs/index.md's "Where to go next" links every page of the site's navigation."""
    guide = INDEX[INDEX.index("## Where to go next") :]
    missing = [page for page in _nav_pages() if page != "index.md" and f"]({page}" not in guide]
    assert not missing, f"docs/index.md's guide misses {missing}"


def test_the_home_page_names_every_store() -> None:
    stores = _bullet(INDEX, "- **One claim per window, by construction.**")
    for store in ("PostgreSQL", "Redis", "SQLite", "Django"):
        assert store in stores


def _demo_sample(text: str) -> str:
    start = text.index("                                            | stock celery beat x3")
    return text[start : text.index("```", start)]


def test_the_demo_output_is_shown_the_same_in_the_readme_and_the_quickstart() -> None:
    readme = _demo_sample(README)
    assert readme == _demo_sample((ROOT / "docs" / "quickstart.md").read_text())
    demo = (ROOT / "examples" / "demo.py").read_text()
    legend = [line for line in readme.splitlines() if re.match(r"^[a-z ]+:\s", line)]
    assert len(legend) >= 5
    for line in legend:
        assert f'print("{line}")' in demo, f"the demo no longer prints {line!r}"
