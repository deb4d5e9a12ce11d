"""The locks: `requirements/dev.txt` pins, with hashes, a version inside every range
`pyproject.toml` declares for the dev extra, so `make test` installs what the package asks
for; `requirements/demo.txt` pins the core dependencies alone, at the same versions, so
`make demo` needs none of the dev toolchain (`make lock` refreshes both)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest brings tomli where tomllib is missing
    import tomli as tomllib

ROOT = Path(__file__).parents[2]
LOCK = ROOT / "requirements" / "dev.txt"
DEMO_LOCK = ROOT / "requirements" / "demo.txt"
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9._-]+)(?:\[[^\]]*\])?==(?P<version>\S+)(?:\s*;\s*(?P<marker>[^\\]+?))?\s*\\?$"
)


def _pins(lock: Path = LOCK) -> dict[str, list[tuple[Version, str | None]]]:
    """Each package of a lock with its pinned versions and the markers they apply under."""
    pins: dict[str, list[tuple[Version, str | None]]] = {}
    for line in lock.read_text().splitlines():
        found = PIN.match(line)
        if found:
            name = canonicalize_name(found["name"])
            pins.setdefault(name, []).append((Version(found["version"]), found["marker"]))
    return pins


def _dev_requirements() -> list[Requirement]:
    """The dev extra with the package's own extras it names expanded, and the core
    dependencies: everything `make` installs for the tests."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    wanted, seen, found = ["dev"], set(), [Requirement(text) for text in project["dependencies"]]
    while wanted:
        extra = wanted.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in extras[extra]:
            requirement = Requirement(text)
            if canonicalize_name(requirement.name) == "safebeat":
                wanted.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def _environment(python: str) -> dict[str, str]:
    return {**default_environment(), "python_version": python, "python_full_version": f"{python}.0"}


@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13"])
def test_every_declared_range_has_a_locked_version_inside_it(python: str) -> None:
    """For each Python the package supports, every dev requirement (and the core and
    extras it pulls in) has exactly one pin in the lock, and that pin is inside its range."""
    pins = _pins()
    environment = _environment(python)
    problems = []
    for requirement in _dev_requirements():
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        versions = [
            version
            for version, marker in pins.get(name, [])
            if marker is None or Marker(marker).evaluate(environment)
        ]
        if len(versions) != 1:
            problems.append(f"{requirement}: {len(versions)} pins for Python {python}")
        elif not requirement.specifier.contains(versions[0], prereleases=True):
            problems.append(f"{requirement}: locked at {versions[0]}")
    assert not problems, "requirements/dev.txt is stale; run `make lock`:\n" + "\n".join(problems)


@pytest.mark.parametrize("lock", [LOCK, DEMO_LOCK], ids=["dev", "demo"])
def test_every_pin_carries_its_hashes(lock: Path) -> None:
    """pip installs each lock with --require-hashes, so every pinned file has a hash."""
    blocks = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text())
    unhashed = [
        block.split()[0] for block in blocks if "==" in block and "--hash=sha256:" not in block
    ]
    assert not unhashed
    assert _pins(lock)


def test_the_demo_lock_is_the_core_at_the_dev_locks_versions() -> None:
    """`make demo` installs the core dependencies (and the build backend) at the versions
    the tests ran with, and nothing from the dev extra."""
    demo, dev = _pins(DEMO_LOCK), _pins(LOCK)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {canonicalize_name(Requirement(text).name) for text in project["dependencies"]}
    assert core <= set(demo), "requirements/demo.txt misses a core dependency; run `make lock`"

    def versions(pins: list[tuple[Version, str | None]] | None) -> set[Version]:
        return {version for version, _marker in pins or []}

    differing = {name for name, pins in demo.items() if versions(pins) != versions(dev.get(name))}
    build_backend = {"hatchling", "editables", "pathspec", "pluggy", "trove-classifiers"}
    assert differing <= build_backend, f"demo and dev locks disagree: {differing}"
    dev_only = {"mypy", "selenium", "django", "psycopg", "redis", "matplotlib", "pytest"}
    assert not dev_only & set(demo), "the demo lock pulls in the dev toolchain"
