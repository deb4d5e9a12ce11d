"""SQL kept in `.sql` files beside each backend: named queries and numbered migrations."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^--\s*include:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    """Return the `-- name: x` blocks of a package's SQL file as {name: sql}.

    A line `-- include: y` in a block stands for the block named `y`, written above it: a
    part two queries share (a join, a condition) is written once."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{package}/{filename}: query {name!r} is defined twice")
        queries[name] = _INCLUDE.sub(lambda m: queries[m.group(1)], body.strip().rstrip(";"))
    return queries


@dataclass(frozen=True)
class Migration:
    """One numbered schema change."""

    version: int
    name: str
    sql: str


def load_migrations(package: str, folder_name: str = "migrations") -> list[Migration]:
    """Return a package's `migrations/NNNN_name.sql` files (or `folder_name`'s) in version order.

    The schema version a store reaches is the last one's number (`schema_target`).
    """
    folder = resources.files(package).joinpath(folder_name)
    migrations = []
    for item in folder.iterdir():
        match = _MIGRATION.match(item.name)
        if match:
            migrations.append(
                Migration(int(match.group(1)), item.name, item.read_text(encoding="utf-8"))
            )
    migrations.sort(key=lambda m: m.version)
    versions = [m.version for m in migrations]
    # A store records only the highest version it reached, so a gap filled later would never
    # be applied to it: the numbers run 0001, 0002, ... with none missing or repeated.
    if versions != list(range(1, len(versions) + 1)):
        raise ValueError(
            f"{package}: migrations must be numbered 0001, 0002, ... without gaps or repeats"
        )
    return migrations


def schema_target(migrations: list[Migration]) -> int:
    """The schema version `migrations` bring a store to: the highest number, 0 for none."""
    return migrations[-1].version if migrations else 0


def apply_pending(
    migrations: list[Migration], version: int, apply: Callable[[Migration], None]
) -> int:
    """Run `apply` (which runs and records one migration) on each of `migrations` newer
    than `version`, in order; return the version the store is at afterwards."""
    for migration in migrations:
        if migration.version > version:
            apply(migration)
            version = migration.version
    return version
