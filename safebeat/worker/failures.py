"""`pause_after_failures`: pause an entry whose latest runs all failed, for every replica.

The worker hook calls `pause_if_failing` after recording a failed run of a window whose
message carries the entry's threshold (beat sets the `safebeat_pause_after_failures`
header from the entry's option or the `safebeat_pause_after_failures` setting). The rule
itself is `safebeat.record_rules.consecutive_failures`, over the store's history; pausing is
the store's `set_paused`, as `safebeat pause` does, so every replica skips the entry's
windows (reason `paused`) until an operator resumes it. The pause carries a note saying
why, and the audit trail records it under the actor `AUDIT_ACTOR`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from safebeat.identity import PAUSE_AFTER_FAILURES_HEADER
from safebeat.record_rules import consecutive_failures
from safebeat.records import AuditAction, AuditEvent, Pause
from safebeat.stores.protocols import AdminStore

logger = logging.getLogger("safebeat.worker")

#: Rows read per check beyond the threshold: skipped and unfinished windows sit between runs.
_SLACK = 20

#: Who the audit trail names for a pause this hook made.
AUDIT_ACTOR = "safebeat (pause_after_failures)"


def pause_if_failing(store: AdminStore, namespace: str, entry: str, threshold: int) -> bool:
    """Pause `entry` if its latest `threshold` finished runs failed in a row; return whether
    this call paused it."""
    history = store.history(namespace, entry, limit=threshold * 2 + _SLACK)
    failures = consecutive_failures(history)
    if failures < threshold:
        return False
    state = store.state(namespace, entry)
    if state is not None and state.paused_at(store.clock()):
        return False
    note = f"{failures} failed runs in a row (pause_after_failures={threshold})"
    if not store.set_paused(namespace, entry, Pause(True, note=note)):
        return False
    store.record_audit(namespace, AuditEvent(AUDIT_ACTOR, AuditAction.PAUSE, entry, (), note))
    logger.error(
        "safebeat: entry %r paused after %d failed runs in a row (pause_after_failures=%d); "
        "its windows are skipped until resumed: fix the task, then `safebeat resume %s`",
        entry,
        failures,
        threshold,
        entry,
    )
    return True


def threshold_of(request: Any) -> int | None:
    """The `pause_after_failures` a Celery request's message carries, or None."""
    headers = getattr(request, "headers", None)
    headers = headers if isinstance(headers, Mapping) else {}
    value = headers.get(
        PAUSE_AFTER_FAILURES_HEADER, getattr(request, PAUSE_AFTER_FAILURES_HEADER, None)
    )
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None
