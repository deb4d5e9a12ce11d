"""Fixtures of the chaos suite: a PostgreSQL server it owns, and the mode it runs in."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.chaos.lab import OwnedPostgres
from tests.chaos.runner import MODES, Mode


@pytest.fixture(scope="session")
def chaos_mode() -> Mode:
    """`short` (CI) unless SAFEBEAT_TEST_CHAOS_MODE names another (`default`, `long`)."""
    name = os.environ.get("SAFEBEAT_TEST_CHAOS_MODE", "short")
    if name not in MODES:
        raise pytest.UsageError(
            f"SAFEBEAT_TEST_CHAOS_MODE={name!r}: expected one of {sorted(MODES)}"
        )
    return MODES[name]


@pytest.fixture(scope="session")
def chaos_postgres() -> Iterator[OwnedPostgres]:
    """A PostgreSQL server of this test worker's own, which scenarios may crash."""
    server = OwnedPostgres()
    yield server
    server.close()
