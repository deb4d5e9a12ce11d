"""One schema: the Django app's models and migrations against the PostgreSQL store's SQL files."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from safebeat.stores.postgres import PostgresStore
from tests import djangosite, pgconn, runscope, services

pytestmark = pytest.mark.django


def describe_schema(cursor: Any, schema: str) -> dict[str, set[tuple[object, ...]]]:
    """Columns, constraints and indexes of the safebeat_* tables in `schema`, comparable."""
    cursor.execute(
        "SELECT table_name, column_name, data_type, is_nullable, "
        "CASE WHEN is_identity = 'YES' OR column_default LIKE 'nextval(%%' THEN 'auto' "
        "ELSE column_default END "
        "FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name LIKE 'safebeat\\_%%' "
        "AND table_name <> 'safebeat_schema_version'",
        [schema],
    )
    columns = set(cursor.fetchall())
    cursor.execute(
        "SELECT c.relname, k.contype, CASE WHEN k.contype = 'p' THEN '' ELSE k.conname END, "
        "pg_get_constraintdef(k.oid) "
        "FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname LIKE 'safebeat\\_%%' "
        "AND c.relname <> 'safebeat_schema_version'",
        [schema],
    )
    constraints = set(cursor.fetchall())
    cursor.execute(
        "SELECT tablename, indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = %s AND tablename LIKE 'safebeat\\_%%' "
        "AND tablename <> 'safebeat_schema_version' AND indexname NOT LIKE '%%pkey' "
        "AND indexname NOT IN ('safebeat_effect_key', 'safebeat_dispatch_window')",
        [schema],
    )
    indexes = {
        (table, name, re.sub(rf"\b{re.escape(schema)}\.", "", definition))
        for table, name, definition in cursor.fetchall()
    }
    return {"columns": columns, "constraints": constraints, "indexes": indexes}


def test_migrations_are_in_step_with_the_models(django_aliases: dict[str, str]) -> None:
    """`makemigrations --check` finds nothing to add: migrations and models agree."""
    from django.core.management import call_command

    call_command("makemigrations", "safebeat", check=True, dry_run=True, verbosity=0)


#: Django migrations with no SQL counterpart: they change only what MySQL/MariaDB needs.
MYSQL_ONLY_MIGRATIONS = ["0004_binary_keys_on_mysql"]


def test_one_django_migration_per_sql_migration(django_aliases: dict[str, str]) -> None:
    """Each numbered SQL file of the PostgreSQL store has its Django migration of the same
    name, in order; the only others are the MySQL/MariaDB-only ones. (The numbers differ
    from the first MySQL-only migration on: Django numbers every migration.)"""
    from django.db import connections

    from safebeat.contrib.django.schema import postgres_migrations
    from safebeat.stores.django.setup import migration_state

    _, known = migration_state(connections["sqlite"])
    sql = [m.name.removesuffix(".sql").split("_", 1)[1] for m in postgres_migrations()]
    django = [name.split("_", 1)[1] for name in known if name not in MYSQL_ONLY_MIGRATIONS]
    assert django == sql
    assert set(MYSQL_ONLY_MIGRATIONS) <= set(known)


#: Every key column of safebeat's tables: (table, column).
KEY_COLUMNS = {
    ("safebeat_entry", "namespace"),
    ("safebeat_entry", "name"),
    ("safebeat_dispatch", "namespace"),
    ("safebeat_dispatch", "entry"),
    ("safebeat_replica", "namespace"),
    ("safebeat_replica", "replica"),
    ("safebeat_effect", "namespace"),
    ("safebeat_effect", "key"),
}


def key_collations(cursor: Any) -> dict[tuple[str, str], str]:
    cursor.execute(
        "SELECT table_name, column_name, collation_name FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name LIKE 'safebeat\\_%%' "
        "AND collation_name IS NOT NULL"
    )
    found = {(table, column): collation for table, column, collation in cursor.fetchall()}
    return {column: found[column] for column in KEY_COLUMNS}


@pytest.mark.mariadb
@pytest.mark.parametrize("fresh_alias", ["mariadb"], indirect=True)
def test_migration_gives_existing_mariadb_key_columns_a_binary_no_pad_collation(
    fresh_alias: str,
) -> None:
    """Key columns an older install created case-insensitive are made binary and no-pad."""
    from django.core.management import call_command
    from django.db import connections

    # A database of its own: the worker's shared one holds other tests' keys that differ
    # only in case or trailing spaces, which a case-insensitive key column cannot hold.
    alias = fresh_alias
    call_command("migrate", "safebeat", database=alias, verbosity=0)
    connection = connections[alias]
    with connection.cursor() as cursor:
        for table, column in KEY_COLUMNS:  # as 0001-0003 made them before
            cursor.execute(
                "SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name = %s AND column_name = %s",
                [table, column],
            )
            (length,) = cursor.fetchone()
            cursor.execute(
                f"ALTER TABLE `{table}` MODIFY `{column}` varchar({length}) "
                "CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL"
            )
        assert set(key_collations(cursor).values()) == {"utf8mb4_general_ci"}
    call_command("migrate", "safebeat", "0003", database=alias, verbosity=0)
    call_command("migrate", "safebeat", database=alias, verbosity=0)
    with connection.cursor() as cursor:
        assert set(key_collations(cursor).values()) == {"utf8mb4_nopad_bin"}
        cursor.execute("SELECT 'a' = 'a ' COLLATE utf8mb4_nopad_bin")
        assert cursor.fetchone() == (0,)


@pytest.mark.postgres
def test_tables_made_by_the_models_equal_the_sql_schema(django_aliases: dict[str, str]) -> None:
    """On PostgreSQL, the tables the models create equal those the store's SQL files create:
    same columns, types, nullability, defaults, keys, checks and indexes."""
    from django.apps import apps
    from django.db import connections

    connection = connections[django_aliases["postgres"]]  # migrated: the SQL files ran
    with connection.cursor() as cursor:
        cursor.execute("DROP SCHEMA IF EXISTS models_check CASCADE")
        cursor.execute("CREATE SCHEMA models_check")
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET search_path TO models_check")
        with connection.schema_editor() as editor:
            for model in apps.get_app_config("safebeat").get_models():
                editor.create_model(model)
        with connection.cursor() as cursor:
            cursor.execute("SET search_path TO public")
            from_sql = describe_schema(cursor, "public")
            from_models = describe_schema(cursor, "models_check")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET search_path TO public")
            cursor.execute("DROP SCHEMA IF EXISTS models_check CASCADE")
    assert from_sql["columns"], "the SQL schema has no safebeat tables"
    for part in ("columns", "constraints", "indexes"):
        differ = sorted(map(str, from_models[part] ^ from_sql[part]))
        assert from_models[part] == from_sql[part], f"{part} differ: {differ}"


@pytest.mark.postgres
def test_a_database_migrated_by_django_is_a_migrated_postgres_store(
    django_aliases: dict[str, str],
) -> None:
    """Django's migrations record the SQL versions: the postgresql:// store finds nothing to do."""
    from django.db import connections

    store = PostgresStore(pgconn.from_django(connections[django_aliases["postgres"]].settings_dict))
    try:
        assert store.schema_version() == djangosite_sql_versions()[-1]
        assert store.migrate() == djangosite_sql_versions()[-1]
    finally:
        store.close()


def djangosite_sql_versions() -> list[int]:
    from safebeat.contrib.django.schema import postgres_migrations

    return [m.version for m in postgres_migrations()]


def test_store_tells_which_command_creates_missing_tables(django_aliases: dict[str, str]) -> None:
    """A database without the app's migrations gets an error naming `manage.py migrate`."""
    from safebeat.errors import StoreError
    from safebeat.stores.django import DjangoStore

    store = DjangoStore("django://unmigrated")
    with pytest.raises(StoreError, match=r"manage\.py migrate safebeat --database unmigrated"):
        store.migrate()


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def fresh_alias(
    request: pytest.FixtureRequest,
    django_aliases: dict[str, str],
    pg_admin_url: str,
    tmp_path: Path,
) -> Iterator[str]:
    """An empty database of this test's own, on each vendor, as a Django alias."""
    vendor = request.param
    djangosite.alias_for(request, vendor)  # skips, saying why, where MariaDB is missing
    name = runscope.database(f"zero_{uuid.uuid4().hex[:12]}")
    alias = f"zero_{vendor}"
    mysql = djangosite.mysql_url()
    if vendor == "sqlite":
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "zero.sqlite3")}
    elif vendor == "postgres":
        database = djangosite.postgres_database(services.create_database(pg_admin_url, name))
    else:
        assert mysql is not None
        djangosite.create_mysql_database(mysql, name)
        database = djangosite.mysql_database(mysql, name)
    djangosite.add_alias(alias, database)
    try:
        yield alias
    finally:
        djangosite.remove_alias(alias)
        if vendor == "postgres":
            services.drop_database(pg_admin_url, name)
        elif vendor == "mariadb" and mysql is not None:
            djangosite.drop_mysql_database(mysql, name)


def safebeat_tables(alias: str) -> list[str]:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        names = connections[alias].introspection.table_names(cursor)
    return sorted(name for name in names if name.startswith("safebeat_"))


def test_migrating_to_zero_leaves_no_safebeat_table_and_forward_works_again(
    fresh_alias: str,
) -> None:
    """`migrate safebeat zero` drops every safebeat table, the schema version table included;
    migrating forward again rebuilds them all."""
    from django.core.management import call_command

    def migrate(target: str | None = None) -> None:
        args = ["safebeat", target] if target else ["safebeat"]
        call_command("migrate", *args, database=fresh_alias, verbosity=0, interactive=False)

    migrate()
    created = safebeat_tables(fresh_alias)
    assert {"safebeat_dispatch", "safebeat_entry", "safebeat_replica"} <= set(created)
    migrate("zero")
    assert safebeat_tables(fresh_alias) == []
    migrate()
    assert safebeat_tables(fresh_alias) == created
