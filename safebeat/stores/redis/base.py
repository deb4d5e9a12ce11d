"""The Redis store's client, its error boundary, its scripts and key names, and the
conversions between Redis's strings and safebeat's records, which every part uses."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

import redis
import redis.exceptions

from safebeat.config import RedisEviction
from safebeat.errors import ConfigError, StoreError, StoreUnavailable
from safebeat.facts import Dispatched, LiveRun
from safebeat.records import (
    DispatchRecord,
    EntryState,
    Outcome,
    Status,
)
from safebeat.store_urls import password_of, redact, scrub
from safebeat.stores.decoding import DECODE_ERRORS, problem_of, record_of, unreadable_state
from safebeat.stores.redis.checks import check_eviction
from safebeat.stores.redis.connection import Client, Timeouts, connect
from safebeat.stores.sharing import Sharing
from safebeat.stores.sqlfiles import load_queries

_BLOCKS = load_queries(__package__ or "safebeat.stores.redis", "scripts.lua")

_PRELUDE = _BLOCKS.pop("prelude")

#: Each server-side step, with the helpers they share in front (Lua scripts cannot import).
SCRIPTS = {name: f"{_PRELUDE}\n\n{body}" for name, body in _BLOCKS.items()}

#: The layout of safebeat's keys; `migrate` records it, a newer one is refused.
LAYOUT_VERSION = 1

LAYOUT_KEY = "safebeat:layout"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: How Redis reports an ACL denial inside a Lua script (not as a NOPERM error).
_SCRIPT_DENIED = "can't run this command"

#: How Redis refuses a command, unrun, while a script runs past its busy threshold.
_BUSY = "BUSY "

#: Seconds between the sends of a command Redis refused as `BUSY`.
BUSY_PAUSE = 0.02

#: Entries one script registers or reads the states of: a few milliseconds of Redis's
#: time, well inside its busy threshold and any client's reply timeout, however many
#: entries a namespace has.
SLICE = 1000

#: Entries whose whole history one script reads (the one-time migrate_dispatched).
HISTORY_SLICE = 50

_REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)

#: The key every namespace with a registered entry has (its entries' digests).
NAMESPACE_PATTERN = "safebeat:{*}:digest"


# A burst sends and reads back the same few instants (its windows, the entries' anchors)
# thousands of times: each is converted once.
@lru_cache(maxsize=4096)
def _us(instant: datetime) -> str:
    return str((instant - _EPOCH) // timedelta(microseconds=1))


@lru_cache(maxsize=4096)
def _instant(micros: str | int | float) -> datetime:
    # Scores come back as text of a double: exact for microsecond instants (< 2**53).
    return _EPOCH + timedelta(microseconds=int(float(micros)))


def _maybe_instant(micros: str | None) -> datetime | None:
    return None if micros is None or micros == "" else _instant(micros)


def key_prefix(namespace: str) -> str:
    """The prefix of every key of `namespace`; the braces make it Redis Cluster's hash tag."""
    return f"safebeat:{{{namespace}}}"


def _states(names: Sequence[str], columns: Sequence[Sequence[str | None]]) -> dict[str, EntryState]:
    """Build states from the scripts' columns: anchor, defined, last, digest, schedule,
    paused, then the facts (the live run's window, start, lease end and task id, the newest
    dispatched window, its claim and start: see `load_states` in scripts.lua)."""
    anchors, defined, lasts, digests, schedules, paused, *facts = columns
    states = {}
    share = Sharing().shared
    for i, name in enumerate(names):
        anchor, defined_at, digest = anchors[i], defined[i], digests[i]
        if anchor is None or defined_at is None or digest is None:
            continue  # not registered (or only partly, after an eviction)
        try:
            states[name] = EntryState(
                name=name,
                anchor=share(_instant(anchor)),
                defined_at=share(_instant(defined_at)),
                last_window=share(_maybe_instant(lasts[i])),
                digest=digest,
                schedule=share(schedules[i] or ""),
                **_pause(paused[i]),
                **_facts([column[i] for column in facts]),
            )
        except DECODE_ERRORS as exc:  # a value not as safebeat writes it: this entry only
            states[name] = unreadable_state(name, problem_of(exc))
    return states


def _facts(values: Sequence[str | None]) -> dict[str, Any]:
    """The facts of an EntryState from one entry's fact columns (see `_states`)."""
    run_window, run_started, lease_until, task_id, window, claimed_at, started_at = values
    facts: dict[str, Any] = {}
    if run_started:
        facts["live_run"] = LiveRun(
            _instant(run_window or ""), _instant(run_started), _instant(lease_until or ""), task_id
        )
    if window:
        facts["newest_dispatched"] = Dispatched(
            _instant(window), _instant(claimed_at or ""), _maybe_instant(started_at)
        )
    return facts


def _pause(value: str | None) -> dict[str, Any]:
    """The pause fields of an EntryState from its `P:paused` value (see `pause_value`)."""
    if not value:
        return {"paused": False}
    if value == "1":
        return {"paused": True}
    held = json.loads(value)
    return {
        "paused": True,
        "paused_until": _maybe_instant(held["until"]),
        "pause_note": held["note"],
    }


def pause_value(until: datetime | None, note: str | None) -> str:
    """What `P:paused` holds for a paused entry: 1, or the JSON of its end and note."""
    if until is None and note is None:
        return "1"
    return json.dumps({"until": None if until is None else _us(until), "note": note})


def _claim_key(prefix: str, entry: str, window: datetime) -> str:
    """The key whose existence is the claim of `window` (see scripts.lua)."""
    return f"{prefix}:claim:{_us(window)}:{entry}"


def _micros(duration: timedelta) -> int:
    return duration // timedelta(microseconds=1)


def _record(row_id: int, flat: Sequence[str]) -> DispatchRecord:
    """The history record of a hash's fields, or an unreadable one if a value cannot be read."""
    fields = dict(zip(flat[::2], flat[1::2], strict=True))
    return record_of(row_id, fields.get("entry", ""), lambda: _decoded_record(row_id, fields))


def _decoded_record(row_id: int, fields: Mapping[str, str]) -> DispatchRecord:

    def number(name: str) -> int | None:
        value = fields.get(name)
        return None if value is None else int(value)

    runtime = number("runtime")
    outcome = fields.get("outcome")
    return DispatchRecord(
        id=row_id,
        entry=fields["entry"],
        window=_instant(fields["window"]),
        status=Status(fields["status"]),
        task_id=fields.get("task_id"),
        task_name=fields.get("task_name"),
        reason=fields.get("reason"),
        skipped_from=_maybe_instant(fields.get("skipped_from")),
        skipped_count=number("skipped_count"),
        replica=fields["replica"],
        host=fields["host"],
        pid=int(fields["pid"]),
        claimed_at=_instant(fields["claimed_at"]),
        sent_at=_maybe_instant(fields.get("sent_at")),
        attempts=int(fields["attempts"]),
        error=fields.get("error"),
        started_at=_maybe_instant(fields.get("started_at")),
        finished_at=_maybe_instant(fields.get("finished_at")),
        outcome=None if outcome is None else Outcome(outcome),
        runtime=None if runtime is None else timedelta(microseconds=runtime),
        worker=fields.get("worker"),
        retries=number("retries"),
        runs=number("runs") or 0,
        duplicates=number("duplicates") or 0,
        lease_until=_maybe_instant(fields.get("lease_until")),
    )


logger = logging.getLogger("safebeat.stores.redis")


class RedisBase:
    """The server (one, Sentinel or Cluster), the client to it and the boundary around
    every call; each step runs as one of `SCRIPTS`."""

    def __init__(
        self,
        url: str,
        *,
        lock_timeout: timedelta = timedelta(seconds=5),
        eviction: RedisEviction = "warn",
        timeouts: Timeouts | None = None,
    ) -> None:
        self._url = url
        self.display_url = redact(url)
        self._lock_ttl_ms = max(100, int(lock_timeout.total_seconds() * 1000))
        self._eviction = eviction
        self._timeouts = timeouts or Timeouts(reply=max(5.0, lock_timeout.total_seconds()))
        self._client: Client | None = None
        self._scripts: dict[str, Any] = {}
        self._checked = False
        # The newest window this process claimed per namespace and entry: if Redis comes
        # back without them (a restart from an old snapshot), this replica still never
        # claims them twice. One dict per namespace, not a (namespace, entry) key per entry.
        self._claimed_until: dict[str, dict[str, datetime]] = {}

    def _connection(self) -> Client:
        if self._client is None:
            client = connect(self._url, self._timeouts)
            self._scripts = {name: client.register_script(src) for name, src in SCRIPTS.items()}
            self._client = client
        if not self._checked:
            check_eviction(self._client, self._eviction, self.display_url)
            self._checked = True
        return self._client

    @contextmanager
    def _boundary(self, action: str) -> Iterator[Client]:
        """Yield the client; map redis-py's errors onto safebeat's, without passwords."""
        try:
            client = self._connection()
        except ConfigError as exc:  # a URL redis-py cannot read: retrying will not help
            raise StoreError(f"Redis store {self.display_url}: {exc}") from exc
        except _REDIS_ERRORS as exc:
            raise self._translate(action, exc) from exc
        try:
            yield client
        except _REDIS_ERRORS as exc:
            raise self._translate(action, exc) from exc

    def _translate(self, action: str, exc: Exception) -> StoreError:
        """The safebeat error for a redis-py error; a connection error drops the client."""
        if isinstance(exc, redis.exceptions.AuthenticationError):
            return StoreError(self._refused(action, exc))
        message = self._message(action, exc)
        if str(exc).startswith(_BUSY):  # another client's script, still running: not ours
            return StoreUnavailable(message)
        if isinstance(
            exc,
            redis.exceptions.ConnectionError
            | redis.exceptions.TimeoutError
            | redis.exceptions.BusyLoadingError
            | redis.exceptions.ReadOnlyError
            | redis.exceptions.ClusterDownError
            # No cluster node reachable, or a slot without a node.
            | redis.exceptions.RedisClusterException,
        ):
            self._drop()
            return StoreUnavailable(message)
        if isinstance(exc, redis.exceptions.NoPermissionError) or _SCRIPT_DENIED in str(exc):
            return StoreError(
                f"{message}; the Redis ACL user lacks a command or key pattern that "
                "docs/redis.md lists"
            )
        return StoreError(message)

    def _refused(self, action: str, exc: BaseException) -> str:
        """Why Redis refused us, in words: no password given, or a wrong one."""
        text = str(exc)
        if password_of(self._url) is None and ("NOAUTH" in text or "HELLO must be called" in text):
            # Redis's own words ("HELLO must be called with the client already
            # authenticated...") name a protocol step, not the fix.
            return (
                f"Redis store {self.display_url}: {action} failed: the server requires a "
                "password and the URL gives none; write redis://:PASSWORD@host:port/db "
                "(or redis://USER:PASSWORD@...)"
            )
        return f"{self._message(action, exc)}; check the user name and password in the store URL"

    def _message(self, action: str, exc: BaseException) -> str:
        detail = scrub(str(exc).strip() or type(exc).__name__, self._url)
        return f"Redis store {self.display_url}: {action} failed: {detail}"

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except redis.exceptions.RedisError:
                logger.debug("safebeat: closing the Redis client failed", exc_info=True)

    def close(self) -> None:
        self._drop()

    def _run(self, script: str, keys: Sequence[str], args: Sequence[object]) -> Any:
        """Run `script`; while Redis answers `BUSY` (another client's script is past the
        busy threshold), send it again, for as long as a reply may take. A `BUSY` command
        never ran, so this re-runs nothing; giving up instead would, for `record_publish`,
        leave published claims unrecorded, to be published again after the claim
        timeout. A script that timed out is never sent again here: it may have run."""
        give_up = time.monotonic() + self._timeouts.reply
        while True:
            try:
                return self._scripts[script](keys=list(keys), args=list(args))
            except redis.exceptions.ResponseError as exc:
                if not str(exc).startswith(_BUSY) or time.monotonic() >= give_up:
                    raise
            time.sleep(BUSY_PAUSE)

    def clock(self) -> datetime:
        with self._boundary("read the clock") as client:
            seconds, micros = client.time()
        return _EPOCH + timedelta(seconds=int(seconds), microseconds=int(micros))
