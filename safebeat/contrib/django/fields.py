"""The text column of a key: `text` where the SQL stores use it, bounded `varchar` in MySQL.

PostgreSQL and SQLite index `text` as it is, and the `postgresql://` store's tables use
it, so the Django tables do too. MySQL and MariaDB cannot index `text`, so there the
column is `varchar(max_length)`, sized so that every unique key fits InnoDB's 3,072-byte
limit in utf8mb4.
"""

from __future__ import annotations

from typing import Any

from django.db import models


class KeyField(models.CharField):  # type: ignore[misc]  # Django is untyped here
    """A key column: `text` in PostgreSQL and SQLite, `varchar(max_length)` in MySQL."""

    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "mysql":
            return f"varchar({self.max_length})"
        return "text"

    def cast_db_type(self, connection: Any) -> str | None:
        return self.db_type(connection)
