"""The Django store (`django://`, `django://<alias>`): safebeat's tables in your project's database.

It uses the Django connection of the named database alias (`default` for `django://`),
so there is no second DSN to configure, on PostgreSQL, MySQL/MariaDB and SQLite. The
tables are those of the `safebeat.contrib.django` app, created by `manage.py migrate`.
Opening the store picks its implementation once, by the alias's database:

- on PostgreSQL through psycopg 3, `DjangoPostgresStore` (`postgres.py`) runs the
  `postgresql://` store's statements on Django's connection: two round trips per tick
  however many entries are due, on the same tables and the same lock;
- everywhere else, `DjangoOrmStore` (`orm/`) runs ORM queries, with a tick lock that
  fits the vendor (`vendors.py`, SQL in `queries.sql`).

Both build on `DjangoDatabase` (`base.py`): the alias, the error boundary and the
migrations; `opening.py` picks one (`open_django_store`, or `DjangoStore(url)`).
"""

from safebeat.stores.django.base import alias_of
from safebeat.stores.django.opening import DjangoStore, open_django_store

__all__ = ["DjangoStore", "alias_of", "open_django_store"]
