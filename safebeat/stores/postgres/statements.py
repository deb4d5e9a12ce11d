"""The PostgreSQL store's operations, run on cursors of a connection someone else owns.

`PostgresOperations` implements the store's operations as statements over a
`CursorSource`: `PostgresStore` gives it cursors of its own psycopg connection, the
`django://` store cursors of Django's connection when the alias is PostgreSQL through
psycopg 3. Each operation sends the statements of one store operation and turns the rows
into safebeat's records; the source owns the connection, maps driver errors, and decides
where a transaction begins and ends: the tick sends its own `BEGIN` and `COMMIT` inside
its two messages unless the source holds a transaction already; `register`,
`write_windows` and `prune` run inside one the source opens; every other operation is one
statement (two for `record_publish` with both outcomes) that needs none.

The statements are kept by client: beat's in `tick.py`, the worker hook's and
`safebeat.claim`'s in `executions.py`, the operator tools' in `admin.py`; the cursor and
its source in `cursors.py`.
"""

from __future__ import annotations

from safebeat.stores.postgres.admin import AdminStatements
from safebeat.stores.postgres.cursors import Cursor, CursorSource, Q, tick_limits
from safebeat.stores.postgres.executions import ExecutionStatements
from safebeat.stores.postgres.tick import REGISTER_SLICE, TickStatements

__all__ = [
    "REGISTER_SLICE",
    "Cursor",
    "CursorSource",
    "PostgresOperations",
    "Q",
    "tick_limits",
]


class PostgresOperations(TickStatements, ExecutionStatements, AdminStatements):
    """The store operations on PostgreSQL: statements over a `CursorSource`.

    Shared by `postgresql://` (its own psycopg connection) and `django://` on a
    PostgreSQL alias (Django's connection): the same tables, lock keys and clock.
    """
