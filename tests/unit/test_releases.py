"""`releases.toml` and the rules a next release keeps so that it rolls (docs/upgrading.md).

The rolling-upgrade test (`tests/acceptance/test_rolling_upgrade.py`) runs the previous
release beside the checkout; these checks catch earlier, on the text of the tree, what
would break it: a recorded commit that is not the release, a Redis key layout the
previous release refuses, a migration that drops or tightens what it still uses.
"""

from __future__ import annotations

import re

import pytest

from safebeat import __version__
from tests import releases
from tests.releases import contracting


def test_each_release_records_a_full_commit_a_date_and_its_schema_versions() -> None:
    """A release names its commit by the full hash (abbreviations grow ambiguous), and the
    schema version of every store at that commit."""
    for release in releases.recorded():
        assert re.fullmatch(r"[0-9a-f]{40}", release.commit), release
        assert release.date.year >= 2026, release
        assert set(release.schema) == {*releases.MIGRATION_FOLDERS, "redis"}, release


def test_the_checkout_is_the_newest_release_or_later() -> None:
    """The version is never older than the last release recorded, and is that release's
    only while the package is that release's code: any change after it carries a later
    version (the next one's `.dev0`), so replicas of the two tell themselves apart in
    `safebeat status` during a roll."""
    release = releases.newest()
    ours, theirs = releases.version_key(__version__), releases.version_key(release.version)
    assert ours >= theirs
    if ours == theirs:
        releases.require_commit(release)
        changed = releases._git("diff", "--quiet", release.commit, "--", "safebeat")
        assert changed.returncode == 0, (
            f"safebeat/ changed since release {release.version} ({release.commit}) but "
            f"still says {__version__}: set safebeat/_version.py to the next version's .dev0"
        )


def test_each_release_commit_sets_its_version_and_ships_its_schema_versions() -> None:
    """The recorded commit is the release: its `_version.py` says so, and its migrations
    reach the schema versions recorded beside it."""
    for release in releases.recorded():
        releases.require_commit(release)
        assert releases.schema_of_commit(release.commit) == release.schema, release.version
        version_file = releases._git("show", f"{release.commit}:safebeat/_version.py")
        assert f'__version__ = "{release.version}"' in version_file.stdout.decode()


def test_schema_versions_never_go_back_from_the_newest_release() -> None:
    """Migrations are only ever added: each store's version is at least the release's."""
    release = releases.newest()
    now = releases.schema_of_checkout()
    assert all(now[store] >= version for store, version in release.schema.items()), now


def test_the_redis_key_layout_is_the_one_the_newest_release_accepts() -> None:
    """A Redis store refuses a key layout newer than its own (`StoreError`, "upgrade
    safebeat"), so a release that raised it would stop every replica of the previous one
    that (re)starts during the roll. New keys are added under the same layout version."""
    release = releases.newest()
    assert releases.schema_of_checkout()["redis"] == release.schema["redis"]


def test_migrations_since_the_newest_release_only_add() -> None:
    """A migration newer than the last release drops, renames or tightens nothing the
    release may use, unless it says since which release it is unused (contract)."""
    release = releases.newest()
    recorded = {r.version for r in releases.recorded()}
    for path in releases.migrations_after(release.schema):
        text = path.read_text(encoding="utf-8")
        mark = releases.CONTRACT_MARK.search(text)
        if mark:
            assert mark.group(1) in recorded, f"{path.name}: {mark.group(1)} is not a release"
            continue
        found = contracting(text, sql=path.suffix == ".sql")
        assert found == [], (
            f"{path.relative_to(releases.ROOT)} can break a replica of {release.version} "
            f"during a rolling upgrade: {found}. Add instead (docs/upgrading.md), or mark "
            "it `-- contract: unused since <release>` once a release no longer uses it."
        )


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE safebeat_entry DROP COLUMN note",
        "ALTER TABLE safebeat_entry DROP note",
        "DROP TABLE IF EXISTS safebeat_counter",
        "DROP INDEX safebeat_dispatch_claimed",
        "ALTER TABLE safebeat_entry RENAME COLUMN note TO remark",
        "ALTER TABLE safebeat_entry RENAME TO safebeat_entries",
        "ALTER TABLE safebeat_entry ALTER COLUMN note TYPE varchar(20)",
        "ALTER TABLE safebeat_entry ALTER COLUMN note SET NOT NULL",
        "ALTER TABLE safebeat_entry ADD COLUMN weight integer NOT NULL",
        "ALTER TABLE safebeat_entry ADD weight integer NOT NULL, ADD b text",
        "ALTER TABLE safebeat_entry ADD CONSTRAINT positive CHECK (weight > 0)",
        "CREATE UNIQUE INDEX safebeat_entry_note ON safebeat_entry (note)",
        "ALTER TABLE safebeat_entry ADD COLUMN w integer PRIMARY KEY",
        "ALTER TABLE safebeat_entry ADD COLUMN w integer UNIQUE",
        "CREATE TRIGGER refuse BEFORE INSERT ON safebeat_dispatch EXECUTE FUNCTION nope()",
        "CREATE OR REPLACE TRIGGER refuse BEFORE INSERT ON safebeat_dispatch EXECUTE FUNCTION f()",
        "TRUNCATE safebeat_dispatch",
        "DELETE FROM safebeat_dispatch",
        "UPDATE safebeat_entry SET anchor = NULL",
    ],
)
def test_the_migration_check_flags_sql_that_breaks_the_release_before(sql: str) -> None:
    """Dropped, renamed, retyped or tightened columns, new constraints and keys, triggers,
    rows removed or rewritten: flagged."""
    assert contracting(f"-- a migration\n{sql};\n", sql=True) != []


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE safebeat_note (namespace text NOT NULL, PRIMARY KEY (namespace))",
        "ALTER TABLE safebeat_entry ADD COLUMN note text",
        "ALTER TABLE safebeat_entry ADD COLUMN weight integer NOT NULL DEFAULT 1",
        "CREATE INDEX safebeat_entry_note ON safebeat_entry (note) -- not unique: drop later",
        "INSERT INTO safebeat_counter (namespace, name, value) VALUES ('', 'x', 0)",
    ],
)
def test_the_migration_check_lets_additions_through(sql: str) -> None:
    """New tables, nullable or defaulted columns, plain indexes, data: not flagged."""
    assert contracting(f"{sql};\n", sql=True) == []


def test_the_migration_check_flags_django_operations_that_remove_or_run_code() -> None:
    """RemoveField, AlterField, RunPython and the like are flagged; AddField is not."""
    text = (
        "operations = [migrations.AddField('entry', 'note', models.TextField(null=True)),\n"
        "    migrations.RemoveField('entry', 'remark'), migrations.RunPython(copy)]"
    )
    assert contracting(text, sql=False) == ["migrations.RemoveField", "migrations.RunPython"]
