"""Key and name columns compare byte for byte on MySQL/MariaDB (nothing to do elsewhere).

Tables created before this migration compare `namespace`, `name`, `entry`, `replica` and
`key` with the server's default collation, usually `utf8mb4_general_ci`: case-, accent-
and trailing-space-insensitive, so `Nightly` and `nightly` were one entry and
`invoice:17` and `invoice:17 ` one effect key. This gives those columns the binary,
no-pad collation `KeyField` now creates them with (`fields.binary_collation`: plain
`utf8mb4_bin` pads with spaces, so it would still find `'a'` and `'a '` equal).
PostgreSQL and SQLite already compare `text` byte for byte: there it does nothing, and
the PostgreSQL store's SQL files have no counterpart.
"""

from typing import Any

from django.db import migrations

from safebeat.contrib.django.fields import binary_collation

#: (table, column, varchar length) of every key column, as models.py sizes them.
KEY_COLUMNS = (
    ("safebeat_entry", "namespace", 128),
    ("safebeat_entry", "name", 512),
    ("safebeat_dispatch", "namespace", 128),
    ("safebeat_dispatch", "entry", 512),
    ("safebeat_replica", "namespace", 128),
    ("safebeat_replica", "replica", 255),
    ("safebeat_effect", "namespace", 128),
    ("safebeat_effect", "key", 640),
)


def binary_keys(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    collation = binary_collation(connection)
    quote = schema_editor.quote_name
    for table, column, length in KEY_COLUMNS:
        schema_editor.execute(
            f"ALTER TABLE {quote(table)} MODIFY {quote(column)} "
            f"varchar({length}) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL"
        )


class Migration(migrations.Migration):
    dependencies = [("safebeat", "0003_paused_entries")]

    # MySQL cannot roll DDL back, so Django runs it outside a transaction.
    operations = [migrations.RunPython(binary_keys, migrations.RunPython.noop, atomic=False)]
