"""A database server refusing our user, password or database is a configuration error that
says what to fix and where the URL came from; a server that is down stays an outage."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from safebeat import Scheduler
from safebeat.cli import main
from safebeat.errors import StoreError, StoreUnavailable
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.refusals import refusal_hint
from tests import services
from tests.integration.beat import make_app


def with_parts(url: str, *, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = f"{user}@{netloc.rsplit('@', 1)[-1]}"
    path = parts.path if database is None else f"/{database}"
    return urlunsplit((parts.scheme, netloc, path, parts.query, ""))


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("change", "hint"),
    [
        ({"user": "no_such_role_sb"}, "check the user name and password in the store URL"),
        ({"database": "no_such_database_sb"}, "check the database name in the store URL"),
    ],
    ids=["role", "database"],
)
def test_postgresql_refusing_the_login_is_a_configuration_error(
    pg_url: str, change: dict[str, str], hint: str
) -> None:
    store = PostgresStore(with_parts(pg_url, **change))
    with pytest.raises(StoreError) as raised:
        store.clock()
    store.close()
    assert not isinstance(raised.value, StoreUnavailable)
    assert hint in str(raised.value)


@pytest.mark.postgres
def test_an_unreachable_postgresql_stays_an_outage() -> None:
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{services.free_port()}/postgres")
    with pytest.raises(StoreUnavailable) as raised:
        store.clock()
    store.close()
    assert "check the" not in str(raised.value)


@pytest.mark.postgres
def test_beat_says_what_to_fix_and_where_the_url_came_from(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The variable wins over the setting: the banner and the error say which was used."""
    monkeypatch.setenv("SAFEBEAT_URL", with_parts(pg_url, user="no_such_role_sb"))
    app = make_app("memory://", "q", pg_url, "refused")
    scheduler = Scheduler(app)
    try:
        assert "store URL from the SAFEBEAT_URL environment variable" in scheduler.info
        with caplog.at_level(logging.WARNING):
            assert scheduler.tick() > 0
    finally:
        scheduler.close()
    [line] = [r.getMessage() for r in caplog.records if "claiming nothing" in r.getMessage()]
    assert line.startswith("safebeat: store error (")
    assert "check the user name and password in the store URL" in line
    assert line.endswith("; the store URL is from the SAFEBEAT_URL environment variable")
    assert scheduler.metrics.totals.claimed == 0


@pytest.mark.mariadb
@pytest.mark.parametrize(
    ("user", "database", "hint"),
    [
        ("no_such_user_sb", None, "check the user name and password"),
        (None, "no_such_database_sb", "check the database name"),
    ],
    ids=["user", "database"],
)
def test_mariadb_refusals_are_known_through_djangos_wrapper(
    user: str | None, database: str | None, hint: str
) -> None:
    """What the django:// store sees: Django's OperationalError raised from the driver's."""
    import pymysql
    from django.db.utils import OperationalError

    url = services.mysql_url()
    if url is None:
        pytest.skip("no MariaDB/MySQL server")
    connect = services.mysql_connect(url)
    if user is not None:
        connect["user"] = user
    # pymysql.OperationalError, not pymysql.err's: once Django's MySQL backend has imported
    # MySQLdb.converters through pymysql.install_as_MySQLdb(), `pymysql.err` is a second copy
    # of the module whose classes the driver does not raise.
    with pytest.raises(pymysql.OperationalError) as raised:
        pymysql.connect(**connect, database=database, connect_timeout=5)  # type: ignore[arg-type]
    wrapped = OperationalError(*raised.value.args)
    wrapped.__cause__ = raised.value
    where = "of the DATABASES['default'] setting"
    assert refusal_hint(wrapped, where=where) == (
        f"{hint} {where}" + (" (and that the database exists)" if database else "")
    )
    assert refusal_hint(pymysql.OperationalError(2003, "Can't connect")) is None


@pytest.mark.postgres
def test_the_cli_says_what_to_fix_where_the_url_came_from_and_how_to_see_more(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`safebeat status` against a role the server refuses: one line naming what to check,
    the variable the URL came from and --traceback; a password that is also a word of
    the server's message hides the password, not the word."""
    url = with_parts(pg_url, user="no_such_role_sb:on")
    monkeypatch.setenv("SAFEBEAT_URL", url)
    result = CliRunner().invoke(main, ["--namespace", "refused", "status"])
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert "check the user name and password in the store URL" in line
    assert "the store URL is from the SAFEBEAT_URL environment variable" in line
    assert line.endswith("(run again with --traceback for the full error)")
    assert "connection to server" in line  # `on` is hidden where it stands alone only
    assert ":on@" not in line
