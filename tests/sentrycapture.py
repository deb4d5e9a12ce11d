"""A Sentry transport that keeps check-ins instead of sending them, for tests.

`CheckIns` keeps them in memory; with `SB_CHECKINS` set (a folder), `FileCheckIns`
appends each to a JSON-lines file of its own per process, so a test can read what real
beat and worker processes reported.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

#: A DSN that names no reachable server: nothing leaves the process.
DSN = "https://public@sentry.invalid/1"


def check_ins(envelope: Envelope) -> list[dict[str, Any]]:
    """The check-in payloads of an envelope."""
    return [
        dict(item.payload.json or {})
        for item in envelope.items
        if item.type == "check_in" and item.payload.json is not None
    ]


class CheckIns(Transport):
    """Keeps every check-in in `CheckIns.seen` (a class list, cleared by the test)."""

    seen: list[dict[str, Any]] = []  # noqa: RUF012 - shared on purpose, one per test run

    def capture_envelope(self, envelope: Envelope) -> None:
        self.seen.extend(check_ins(envelope))


class FileCheckIns(Transport):
    """Appends each check-in, with this process's role and pid, to a file in SB_CHECKINS."""

    def capture_envelope(self, envelope: Envelope) -> None:
        folder = Path(os.environ["SB_CHECKINS"])
        role = "beat" if "beat" in sys.argv else "worker"
        with (folder / f"{role}-{os.getpid()}.jsonl").open("a") as out:
            for payload in check_ins(envelope):
                out.write(json.dumps({**payload, "role": role, "pid": os.getpid()}) + "\n")
