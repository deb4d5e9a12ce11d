"""The migration operation that keeps one schema: the PostgreSQL store's SQL, or the models.

Each Django migration of this app wraps one numbered SQL migration of the PostgreSQL
store (`safebeat/stores/postgres/migrations/NNNN_*.sql`) in `SchemaVersion(N, operations)`:

- on PostgreSQL it runs that very file, under the store's migration lock, and records it
  in `safebeat_schema_version`, so a database migrated by Django is a migrated
  `postgresql://` store and the other way round (a version already applied is skipped);
- on MySQL/MariaDB and SQLite, which the SQL files do not cover, it applies `operations`,
  the model changes that mirror the file (a test compares the tables both make).

Django's migration state always comes from `operations`.
"""

from __future__ import annotations

from typing import Any

from django.db.migrations.operations.base import Operation

from safebeat.stores.sql_common import advisory_key
from safebeat.stores.sqlfiles import Migration, load_migrations, load_queries

_PACKAGE = "safebeat.stores"  # not ...stores.postgres, whose import needs psycopg 3


def postgres_migrations() -> list[Migration]:
    """The PostgreSQL store's numbered SQL migrations, in order."""
    return load_migrations(_PACKAGE, "postgres/migrations")


class SchemaVersion(Operation):  # type: ignore[misc]  # Django is untyped here
    """Bring safebeat's tables to schema `version` (see the module docstring)."""

    reversible = True
    reduces_to_sql = False

    def __init__(self, version: int, operations: list[Operation]) -> None:
        self.version = version
        self.operations = operations

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (self.__class__.__qualname__, [self.version, self.operations], {})

    def describe(self) -> str:
        return f"safebeat schema version {self.version}"

    def state_forwards(self, app_label: str, state: Any) -> None:
        for operation in self.operations:
            operation.state_forwards(app_label, state)

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor == "postgresql":
            self._apply_sql(schema_editor)
            return
        for operation in self.operations:
            next_state = from_state.clone()
            operation.state_forwards(app_label, next_state)
            operation.database_forwards(app_label, schema_editor, from_state, next_state)
            from_state = next_state

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        before: dict[int, Any] = {}
        for index, operation in enumerate(self.operations):
            before[index] = to_state
            to_state = to_state.clone()
            operation.state_forwards(app_label, to_state)
        for index in reversed(range(len(self.operations))):
            from_state, to_state = to_state, before[index]
            self.operations[index].database_backwards(
                app_label, schema_editor, from_state, to_state
            )
        if schema_editor.connection.vendor == "postgresql":
            self._forget_sql(schema_editor)

    def _forget_sql(self, schema_editor: Any) -> None:
        """Unrecord this version; with none left, drop the version table too."""
        queries = load_queries(_PACKAGE, "postgres/queries.sql")
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(queries["lock_migrations"], {"key": advisory_key("migrate")})
            cursor.execute(queries["forget_migration"], {"version": self.version})
            cursor.execute(queries["drop_version_table_if_empty"])

    def _apply_sql(self, schema_editor: Any) -> None:
        queries = load_queries(_PACKAGE, "postgres/queries.sql")
        [migration] = [m for m in postgres_migrations() if m.version == self.version]
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(queries["lock_migrations"], {"key": advisory_key("migrate")})
            cursor.execute(queries["create_version_table"])
            cursor.execute(queries["schema_version"])
            (applied,) = cursor.fetchone()
            if applied >= self.version:
                return  # applied before, by the postgresql:// store
            cursor.execute(migration.sql)
            cursor.execute(
                queries["record_migration"], {"version": migration.version, "name": migration.name}
            )
