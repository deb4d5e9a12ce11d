"""The releases recorded in `releases.toml`, and virtualenvs that run one of them.

`releases.toml` maps each release to the commit it was cut from and to the schema versions
that commit ships. A git tag may not travel with a copy of the repository; the file does,
and a clone has the history, so a test can build any recorded release from its commit
(`export`) and install it in a virtualenv of its own (`virtualenv`), where this checkout is
not importable.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pytest
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: hatchling, in the dev extra, brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
RELEASES_FILE = ROOT / "releases.toml"

#: Where each store's schema version is read in a tree: numbered migration files, or
#: the Redis store's key-layout constant.
MIGRATION_FOLDERS = {
    "postgres": "safebeat/stores/postgres/migrations",
    "sqlite": "safebeat/stores/sqlite/migrations",
    "django": "safebeat/contrib/django/migrations",
}
REDIS_LAYOUT_FILE = "safebeat/stores/redis/base.py"
_NUMBERED = re.compile(r"^(\d{4})_[a-z0-9_]+\.(?:sql|py)$")
_LAYOUT = re.compile(r"^LAYOUT_VERSION = (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class Release:
    version: str
    date: date
    commit: str
    #: Schema version per store ("postgres", "sqlite", "django", "redis") at `commit`.
    schema: Mapping[str, int]


def version_key(version: str) -> Version:
    """A version, ordered as PEP 440 orders them (`0.2.0.dev0` after `0.1.0`, before
    `0.2.0`)."""
    return Version(version)


def recorded(path: Path = RELEASES_FILE) -> list[Release]:
    """Every release in `releases.toml`, oldest first."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    releases = [
        Release(version, fields["date"], fields["commit"], dict(fields["schema"]))
        for version, fields in data.get("releases", {}).items()
    ]
    return sorted(releases, key=lambda release: version_key(release.version))


def newest() -> Release:
    """The last release: the one the checkout must be able to roll from (the test
    asking is skipped while none is recorded)."""
    releases = recorded()
    if not releases:
        pytest.skip("releases.toml records no release yet")
    return releases[-1]


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=False, capture_output=True, timeout=120
    )


def has_commit(commit: str) -> bool:
    try:
        return _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0
    except FileNotFoundError:  # no git at all
        return False


def require_commit(release: Release) -> None:
    """Skip the test when this copy lacks the release's commit; fail instead on CI.

    A shallow clone (or an unpacked sdist) has no history to build the release from; CI
    must have it, or the upgrade test would pass there by never running.
    """
    if has_commit(release.commit):
        return
    message = (
        f"commit {release.commit} of release {release.version} (releases.toml) is not in "
        f"this copy of the repository ({ROOT}): a shallow clone? `git fetch --unshallow` "
        "(or a clone with the full history) is needed to test upgrades from it"
    )
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def export(commit: str, dest: Path) -> Path:
    """The tree of `commit`, as `git archive` gives it, unpacked into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit],
        check=True,
        capture_output=True,
        timeout=120,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=120)
    return dest


def uv() -> str:
    """The `uv` beside this interpreter (the dev extra installs it), else on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if found is None:
        pytest.skip("uv is not installed: pip install -e '.[dev]'")
    return found


def constraints(dest: Path) -> Path:
    """This environment's distributions pinned, safebeat's excepted, as a constraints file.

    A virtualenv installed with it runs the dependency versions the tests run, so what
    differs between it and this checkout is safebeat alone.
    """
    pins = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if name and name.lower() != "safebeat":
            pins.setdefault(name.lower(), f"{name}=={distribution.version}")
    dest.write_text("\n".join(sorted(pins.values())) + "\n", encoding="utf-8")
    return dest


#: What kombu's Redis transport imports beyond safebeat's `redis` extra. kombu's own
#: `redis` extra (celery[redis]) pins one exact version of it, which this environment may
#: not have; installed alone, it takes this environment's.
REDIS_TRANSPORT = "packaging"


def virtualenv(dest: Path, *requirements: str) -> Path:
    """A virtualenv in `dest` on this interpreter with `requirements` installed; its python."""
    subprocess.run(
        [uv(), "venv", "--quiet", "--python", sys.executable, str(dest)],
        check=True,
        timeout=120,
    )
    python = dest / "bin" / "python"
    pins = constraints(dest / "constraints.txt")
    subprocess.run(
        [uv(), "pip", "install", "--quiet", "--python", str(python), "--constraint", str(pins),
         *requirements],
        check=True,
        timeout=600,
    )  # fmt: skip
    return python


def installed_safebeat(python: Path, cwd: Path) -> tuple[str, Path]:
    """(version, package folder) of the safebeat `python` imports, run from `cwd`
    with no PYTHONPATH: what a beat started from there gets."""
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    code = "import safebeat; print(safebeat.__version__); print(safebeat.__path__[0])"
    answer = subprocess.run(
        [str(python), "-c", code],
        cwd=cwd,
        env=environment,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    version, folder = answer.stdout.split()
    return version, Path(folder)


def assert_runs_its_own_safebeat(python: Path, cwd: Path, version: str) -> None:
    """`python` imports safebeat `version` from its own virtualenv, never from this checkout."""
    found, folder = installed_safebeat(python, cwd)
    venv = python.parent.parent
    assert folder.is_relative_to(venv), f"{python} imports safebeat from {folder}, not {venv}"
    assert not folder.is_relative_to(ROOT), f"{python} imports this checkout's safebeat"
    assert found == version, f"{python} runs safebeat {found}, expected {version}"


def copy_modules(dest: Path, *modules: Path) -> Path:
    """A folder holding copies of `modules` only (app modules for another virtualenv's
    processes: on their PYTHONPATH, nothing else of this checkout is)."""
    dest.mkdir(parents=True, exist_ok=True)
    for module in modules:
        shutil.copy(module, dest / module.name)
    return dest


# --- schema versions of a tree ---------------------------------------------------------------


def schema_of(
    list_folder: Callable[[str], list[str]], read: Callable[[str], str]
) -> dict[str, int]:
    """The schema version each store reaches in a tree (the working tree or a commit's):
    the highest numbered migration of each SQL backend and of Django, Redis's layout."""
    schema = {}
    for store, folder in MIGRATION_FOLDERS.items():
        numbers = [int(m.group(1)) for name in list_folder(folder) if (m := _NUMBERED.match(name))]
        schema[store] = max(numbers, default=0)
    layout = _LAYOUT.search(read(REDIS_LAYOUT_FILE))
    assert layout is not None, f"{REDIS_LAYOUT_FILE} no longer sets LAYOUT_VERSION"
    schema["redis"] = int(layout.group(1))
    return schema


def schema_of_checkout() -> dict[str, int]:
    return schema_of(
        lambda folder: [path.name for path in (ROOT / folder).iterdir()],
        lambda path: (ROOT / path).read_text(encoding="utf-8"),
    )


def schema_of_commit(commit: str) -> dict[str, int]:
    def list_folder(folder: str) -> list[str]:
        listing = _git("ls-tree", "--name-only", f"{commit}:{folder}")
        return listing.stdout.decode().split() if listing.returncode == 0 else []

    def read(path: str) -> str:
        shown = _git("show", f"{commit}:{path}")
        assert shown.returncode == 0, shown.stderr.decode()
        return shown.stdout.decode()

    return schema_of(list_folder, read)


# --- expand, then contract -------------------------------------------------------------------

#: A migration that may break the release before it says so on a line of its own, naming
#: the release since which nothing uses what it drops or changes: `-- contract: unused
#: since 0.2.0` (SQL) or `# contract: unused since 0.2.0` (Django).
CONTRACT_MARK = re.compile(r"^\s*(?:--|#)\s*contract: unused since (\d+(?:\.\d+)+)\b", re.M)

#: SQL that can break a replica of the release before: anything dropped or renamed, a
#: column's type or nullability changed, a new constraint or key its writes may not meet,
#: a trigger that may refuse them, rows removed or rewritten under it.
_SQL_CONTRACTING = (
    re.compile(r"\bDROP\b", re.I),
    re.compile(r"\bRENAME\b", re.I),
    re.compile(r"\bALTER\s+COLUMN\s+\S+\s+(?:TYPE|SET\s+DATA\s+TYPE|SET\s+NOT\s+NULL)\b", re.I),
    re.compile(r"\bADD\s+CONSTRAINT\b", re.I),
    re.compile(r"\bCREATE\s+UNIQUE\s+INDEX\b", re.I),
    re.compile(r"\bALTER\s+TABLE\b.*\b(?:PRIMARY\s+KEY|UNIQUE|REFERENCES|CHECK)\b", re.I),
    re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:CONSTRAINT\s+)?TRIGGER\b", re.I),
    re.compile(r"^\s*(?:TRUNCATE|DELETE|UPDATE)\b", re.I),
)
#: A column added NOT NULL with no DEFAULT: the previous release's inserts lack it.
_SQL_ADD_COLUMN = re.compile(r"\bADD\s+(?:COLUMN\s+)?(?!CONSTRAINT\b)[^,;]*", re.I)
#: Django operations that drop, rename or tighten, or run code no text check can read.
_DJANGO_CONTRACTING = re.compile(
    r"\bmigrations\.(?:RemoveField|DeleteModel|RenameField|RenameModel|AlterField"
    r"|AddConstraint|RemoveConstraint|RemoveIndex|AlterUniqueTogether|RunSQL|RunPython)\b"
)


def contracting(text: str, *, sql: bool) -> list[str]:
    """The statements (SQL) or operations (a Django migration) in `text` that can break a
    replica of the release before. A check of the text, to make a contraction deliberate:
    it flags, it does not prove."""
    if not sql:
        return [match.group(0) for match in _DJANGO_CONTRACTING.finditer(text)]
    code = re.sub(r"--[^\n]*", "", text)
    found = []
    for statement in filter(str.strip, code.split(";")):
        flat = " ".join(statement.split())
        if any(pattern.search(flat) for pattern in _SQL_CONTRACTING):
            found.append(flat)
            continue
        for clause in _SQL_ADD_COLUMN.findall(flat):
            upper = clause.upper()
            if "NOT NULL" in upper and "DEFAULT" not in upper:
                found.append(flat)
                break
    return found


def migrations_after(schema: Mapping[str, int]) -> list[Path]:
    """The checkout's migration files numbered above `schema` (a release's versions)."""
    newer = []
    for store, folder in MIGRATION_FOLDERS.items():
        for path in sorted((ROOT / folder).iterdir()):
            match = _NUMBERED.match(path.name)
            if match and int(match.group(1)) > schema[store]:
                newer.append(path)
    return newer
