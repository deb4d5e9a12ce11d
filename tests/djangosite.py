"""Django for the tests: one settings object with an alias per real database, set up once.

Aliases: `sqlite` (a file of this test worker's own), `postgres` (a database of this
worker's own on the test PostgreSQL server) and, where a MariaDB/MySQL server is
reachable, `mariadb` ($SAFEBEAT_TEST_MYSQL_URL, else mysql://root@127.0.0.1:3306/).
`default` is the SQLite one. Each alias is migrated on first use, for the apps asked.
"""

from __future__ import annotations

import threading

import pytest

from tests import pgconn, services

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.admin",
    "django_celery_beat",
    "safebeat.contrib.django",
]

_mutex = threading.Lock()
_migrated: set[tuple[str, str]] = set()


def mysql_url() -> str | None:
    """The MariaDB/MySQL server for the tests, or None where none is reachable."""
    return services.mysql_url()


def postgres_database(url: str) -> dict[str, object]:
    """Django's DATABASES entry for a libpq URL (see `tests.pgconn`)."""
    return pgconn.django_database(url)


def mysql_database(url: str, name: str) -> dict[str, object]:
    """Django's DATABASES entry for database `name` on the server of a mysql:// URL."""
    import pymysql

    pymysql.install_as_MySQLdb()
    server = services.mysql_connect(url)
    return {
        "ENGINE": "django.db.backends.mysql",
        "NAME": name,
        "USER": server["user"],
        "PASSWORD": server["password"],
        "HOST": server["host"],
        "PORT": str(server["port"]),
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"CHARSET": "utf8mb4"},
    }


def _mysql_admin(url: str, *statements: str) -> None:
    import pymysql

    conn = pymysql.connect(**services.mysql_connect(url))
    try:
        with conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
    finally:
        conn.close()


def create_mysql_database(url: str, name: str) -> None:
    """(Re)create database `name` on the server of a mysql:// URL."""
    _mysql_admin(
        url,
        f"DROP DATABASE IF EXISTS `{name}`",
        f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4",
    )


def drop_mysql_database(url: str, name: str) -> None:
    """Drop database `name` on the server of a mysql:// URL, if it exists."""
    _mysql_admin(url, f"DROP DATABASE IF EXISTS `{name}`")


def configure(databases: dict[str, dict[str, object]], **extra: object) -> None:
    """Configure Django once for this process with `databases` and set it up."""
    import django
    from django.conf import settings

    if settings.configured:
        return
    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["testserver"],
        STATIC_URL="/static/",
        SECRET_KEY="safebeat-tests",
        USE_TZ=True,
        TIME_ZONE="UTC",
        DATABASES=databases,
        INSTALLED_APPS=INSTALLED_APPS,
        ROOT_URLCONF="tests.djangourls",
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        DATABASE_ROUTERS=["tests.djangosite.BeatRouter"],
        **extra,
    )
    django.setup()


def add_alias(alias: str, database: dict[str, object]) -> None:
    """Add a database alias to the configured Django (for a test needing a database of its own)."""
    from django.db import connections

    databases = {"default": connections.databases["default"], alias: database}
    connections.databases[alias] = connections.configure_settings(databases)[alias]


def remove_alias(alias: str) -> None:
    """Close and forget an alias `add_alias` made."""
    from django.db import connections

    if alias in connections.databases:
        connections[alias].close()
        del connections[alias]
        del connections.databases[alias]


def migrate(alias: str, app: str | None = None) -> None:
    """Apply the migrations of `app` (all apps when None) to `alias`, once per process."""
    from django.core.management import call_command

    with _mutex:
        if (alias, app or "") in _migrated:
            return
        args = [app] if app else []
        call_command("migrate", *args, database=alias, verbosity=0, interactive=False)
        _migrated.add((alias, app or ""))


def alias_for(request: pytest.FixtureRequest, vendor: str) -> str:
    """The alias of `vendor`'s database (see conftest's django_aliases), or skip saying why."""
    aliases: dict[str, str] = request.getfixturevalue("django_aliases")
    if vendor not in aliases:
        pytest.skip(
            "no MariaDB/MySQL server reachable (set SAFEBEAT_TEST_MYSQL_URL, default "
            "mysql://root@127.0.0.1:3306/)"
        )
    return aliases[vendor]


class BeatRouter:
    """Sends django-celery-beat's models to the database a test picks (`BeatRouter.alias`),
    and safebeat's to `BeatRouter.safebeat` while a test sets it (else to `default`)."""

    alias = "default"
    safebeat: str | None = None

    def db_for_read(self, model: type, **hints: object) -> str | None:
        label = model._meta.app_label  # type: ignore[attr-defined]
        if label == "django_celery_beat":
            return self.alias
        return self.safebeat if label == "safebeat" else None

    db_for_write = db_for_read
