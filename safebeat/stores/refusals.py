"""A database server's refusal of who we are (a wrong user name, password or database):
a configuration error to fix, not an outage to wait out.

Retrying will not help, so the stores raise a StoreError saying what to check, where they
would raise StoreUnavailable for a server that is down. PostgreSQL's refusals are known by
their SQLSTATE, or by the server's words when the driver keeps no SQLSTATE (psycopg does
not for a refused connection); MySQL's and MariaDB's by their error numbers.
"""

from __future__ import annotations

import re

#: PostgreSQL's SQLSTATEs of a refusal: 28P01 invalid_password, 28000
#: invalid_authorization_specification (no such role, no pg_hba.conf entry), 3D000
#: invalid_catalog_name (no such database).
_BY_SQLSTATE = {"28P01": "login", "28000": "login", "3D000": "database"}
#: The server's words for those, for a driver that keeps no SQLSTATE (in English, the
#: server's default `lc_messages`).
_PG_LOGIN_WORDS = re.compile(
    r'password authentication failed|role "[^"]*" does not exist|no pg_hba\.conf entry|'
    r"no password supplied|authentication failed for user"
)
_PG_DATABASE_WORDS = re.compile(r'database "[^"]*" does not exist')
#: MySQL and MariaDB: 1045 access denied (password), 1698 access denied (no password, or
#: a user that logs in another way), 1044 access denied to the database; 1049 unknown database.
_BY_MYSQL_NUMBER = {1044: "login", 1045: "login", 1698: "login", 1049: "database"}
_BY_WORDS = (("login", _PG_LOGIN_WORDS), ("database", _PG_DATABASE_WORDS))


def refusal_hint(exc: BaseException, *, where: str = "in the store URL") -> str | None:
    """What to fix when `exc` (or the driver error it wraps) is a server refusing our user,
    password or database; None for any other error. `where` names what holds them."""
    for error in _chain(exc):
        kind = _kind(error)
        if kind == "login":
            return f"check the user name and password {where}"
        if kind == "database":
            return f"check the database name {where} (and that the database exists)"
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the errors it was raised from (Django wraps the driver's), at most a few."""
    chain: list[BaseException] = []
    error: BaseException | None = exc
    while error is not None and len(chain) < 5:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _kind(error: BaseException) -> str | None:
    """ "login", "database" or None: what the server refused, if `error` says it did."""
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str):
        return _BY_SQLSTATE.get(sqlstate)
    args = error.args
    if args and isinstance(args[0], int) and not isinstance(args[0], bool):
        return _BY_MYSQL_NUMBER.get(args[0])
    text = str(error)
    return next((kind for kind, words in _BY_WORDS if words.search(text)), None)
