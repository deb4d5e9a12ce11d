"""Store URLs: backend detection and password redaction."""

from __future__ import annotations

import pytest

from safebeat.errors import ConfigError
from safebeat.store_urls import backend_of, django_alias, redact, scrub


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        ("postgresql://app@db/app", "postgres"),
        ("postgres://app@db/app", "postgres"),
        ("sqlite:///safebeat.sqlite3", "sqlite"),
        ("memory://", "memory"),
    ],
)
def test_backend_follows_the_scheme(url: str, backend: str) -> None:
    """Each supported scheme selects its backend."""
    assert backend_of(url) == backend


def test_unknown_scheme_names_itself_without_the_password() -> None:
    """An unknown scheme is a ConfigError that shows the URL with its password hidden."""
    with pytest.raises(ConfigError) as caught:
        backend_of("mongodb://root:hunter2@db/app")
    assert "mongodb" in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cr3t@db:5432/app", "postgresql://app:***@db:5432/app"),
        (
            "postgresql://app@db/app?password=s3cr3t&sslmode=require",
            "postgresql://app:***@db/app?sslmode=require",
        ),
        ("redis://:s3cr3t@cache:6379/0", "redis://:***@cache:6379/0"),
        ("postgresql://app@db/app", "postgresql://app@db/app"),
        ("sqlite:///safebeat.sqlite3", "sqlite:///safebeat.sqlite3"),
    ],
)
def test_redact_hides_passwords_only(url: str, shown: str) -> None:
    """Passwords in userinfo or the query are replaced by ***; the rest stays readable."""
    assert redact(url) == shown


def test_scrub_removes_the_password_from_driver_messages() -> None:
    """A driver message that echoes the password is cleaned before it is logged."""
    message = 'FATAL: password "s3cr3t" for user app rejected (password=s3cr3t)'
    cleaned = scrub(message, "postgresql://app:s3cr3t@db/app")
    assert "s3cr3t" not in cleaned


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3#cr?t@db:5432/app", "postgresql://app:***@db:5432/app"),
        ("postgres://app:s3%41cr@db/app?sslmode=require", "postgres://app:***@db/app?sslmode=require"),
        ("postgresql://app@h1:5432,h2:5433/app", "postgresql://app@h1:5432,h2:5433/app"),
        ("postgresql:///app?host=/run/pg", "postgresql:///app?host=/run/pg"),
        ("redis://:s3@cr@cache:6379/0", "redis://:***@cache:6379/0"),
        ("rediss://beat:s3cr%23t@cache/1?ssl_password=k3y", "rediss://beat:***@cache/1?ssl_password=***"),
    ],
)  # fmt: skip
def test_a_password_its_driver_reads_whole_leaves_the_rest_shown(url: str, shown: str) -> None:
    """Where the driver reads the password as written (libpq takes `#` and `?` in it,
    urllib an `@`), the URL is shown as the driver reads it, each password as ***."""
    assert redact(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3/cr@db/app", "postgresql://***@db/app"),
        ("postgresql://app:s3@cr@db/app", "postgresql://***@db/app"),
        ("postgresql://app:s3%cr@db/app", "postgresql://***@db/app"),
        ("redis://:s3#cr@cache:6379/0", "redis://***@cache:6379/0"),
        ("rediss://:s3?cr@cache:6379/0", "rediss://***@cache:6379/0"),
        ("redis+sentinel://:s3/cr@s1:26379/mymaster", "redis+sentinel://***@s1:26379/mymaster"),
        ("redis+cluster://beat:s3#cr@n1:7000", "redis+cluster://***@n1:7000"),
        ("redis://cache/0?password=s3&cr", "redis://cache/0?password=***"),
        ("sqlite://app:s3#cr@/safebeat.sqlite3", "sqlite://***@/safebeat.sqlite3"),
        ("django://app:s3#cr@default", "django://***@default"),
    ],
)
def test_a_password_its_driver_cuts_short_hides_all_up_to_the_last_at(url: str, shown: str) -> None:
    """Where the driver cuts the password at a character that should have been
    percent-encoded (or cannot read the URL), no piece of it is shown: the URL shows what
    follows its last `@`, and a driver's message about it is replaced by the fix."""
    assert redact(url) == shown
    message = scrub("could not translate host name 'cr@db' (s3)", url)
    assert "s3" not in message
    assert "cr" not in message.replace("character", "")
    assert "percent-encode" in message


@pytest.mark.parametrize("url", ["django://app:pw#x@default", "django://app:pw/x@default"])
def test_a_django_url_with_a_password_anywhere_is_refused_without_it(url: str) -> None:
    """`django://app:pw#x@default` is refused as holding credentials, though urlsplit would
    take `app:pw` for the alias, and the error does not show the password."""
    with pytest.raises(ConfigError, match="names a database alias") as caught:
        django_alias(url)
    assert "pw" not in str(caught.value)


@pytest.mark.parametrize("password", ["on", "e", "ver", "s3cret"])
def test_scrub_hides_a_password_where_it_stands_alone_never_inside_a_word(password: str) -> None:
    """A short password that is also part of a word (`on` in `connection`) leaves the word
    whole; where the message quotes it on its own, it is hidden."""
    url = f"postgresql://app:{password}@db:5432/app"
    message = (
        f'connection to server at "db", port 5432 failed: FATAL: password "{password}" '
        f"refused for app:{password}@db"
    )
    scrubbed = scrub(message, url)
    assert scrubbed.startswith('connection to server at "db", port 5432 failed: FATAL: ')
    assert 'password "***" refused for app:***@db' in scrubbed
