"""Store URLs: backend detection and password redaction."""

from __future__ import annotations

import pytest

from safebeat.errors import ConfigError
from safebeat.urls import backend_of, redact, scrub


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
            "postgresql://app@db/app?password=***&sslmode=require",
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
