"""The text column of a key: `text` where the SQL stores use it, bounded binary `varchar` in MySQL.

PostgreSQL and SQLite index `text` as it is and compare it byte for byte, and the
`postgresql://` store's tables use it, so the Django tables do too. MySQL and MariaDB
cannot index `text`, so there the column is `varchar(max_length)`, sized so that every
unique key fits InnoDB's 3,072-byte limit in utf8mb4, with a binary collation that does
not pad: the server's default (`utf8mb4_general_ci`) would make `Nightly` and `nightly`,
`jose` and `josé`, `invoice:17` and `invoice:17 ` one entry, one effect key.
"""

from __future__ import annotations

from typing import Any

from django.db import models


def binary_collation(connection: Any) -> str:
    """The utf8mb4 collation of a MySQL/MariaDB server that compares keys byte for byte.

    `utf8mb4_bin` is binary but PAD SPACE on MariaDB and MySQL alike: it finds `'a'` and
    `'a '` equal. MariaDB has had `utf8mb4_nopad_bin` since 10.2, MySQL `utf8mb4_0900_bin`
    since 8.0.17; an older MySQL keeps `utf8mb4_bin`, where trailing spaces still collide.
    """
    if connection.mysql_is_mariadb:
        return "utf8mb4_nopad_bin"
    if connection.mysql_version >= (8, 0, 17):
        return "utf8mb4_0900_bin"
    return "utf8mb4_bin"


class KeyField(models.CharField):  # type: ignore[misc]  # Django is untyped here
    """A key column: `text` in PostgreSQL and SQLite, binary `varchar(max_length)` in MySQL."""

    def db_type(self, connection: Any) -> str | None:
        if connection.vendor == "mysql":
            collation = binary_collation(connection)
            return f"varchar({self.max_length}) CHARACTER SET utf8mb4 COLLATE {collation}"
        return "text"

    def cast_db_type(self, connection: Any) -> str | None:
        if connection.vendor == "mysql":
            return f"varchar({self.max_length})"
        return "text"
