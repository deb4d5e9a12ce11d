"""The Redis store: a `SET NX PX` tick lock, one marker key per window, Lua for every step.

Each step runs as one Lua script, so it is atomic and one round trip: a tick is two
(take the lock and load the states; insert the claims, advance the states, take over
stale claims and release the lock), however many entries are due. A window's claim is
the key `safebeat:{<namespace>}:claim:<window>:<entry>`, created only if absent:
correctness rests on that key alone, never on the lock, whose TTL (`lock_timeout`)
only bounds how long a frozen replica makes the others wait. Every key of a namespace
carries the hash tag `{<namespace>}`, so Redis Cluster keeps them in one slot. "Now" is
Redis `TIME`. Only the lock has a TTL: claims and history are deleted by `prune`, never
by expiry, so a `volatile-*` eviction policy cannot touch them (an `allkeys-*` one can,
which is why the store checks the policy when it first connects).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

try:
    import redis
    import redis.exceptions
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "safebeat's Redis store needs redis-py: pip install 'safebeat[redis]'"
    ) from exc

from safebeat.config import RedisEviction
from safebeat.errors import ConfigError, StoreError, StoreUnavailable
from safebeat.identity import Replica
from safebeat.records import (
    Claim,
    Definition,
    DispatchRecord,
    EntryState,
    NewClaim,
    Outcome,
    Planner,
    Reclaim,
    Registration,
    ReplicaRecord,
    Start,
    Status,
    TickPlan,
    TickResult,
    states_after,
)
from safebeat.stores.base import StoreCheck
from safebeat.stores.redis.checks import check_eviction, eviction_hazard, memory_policies
from safebeat.stores.redis.connection import Client, Timeouts, connect
from safebeat.stores.sqlfiles import load_queries
from safebeat.urls import password_of, redact, scrub

logger = logging.getLogger("safebeat.stores.redis")

_BLOCKS = load_queries(__name__, "scripts.lua")
_PRELUDE = _BLOCKS.pop("prelude")
#: Each server-side step, with the helpers they share in front (Lua scripts cannot import).
SCRIPTS = {name: f"{_PRELUDE}\n\n{body}" for name, body in _BLOCKS.items()}
#: The layout of safebeat's keys; `migrate` records it, a newer one is refused.
LAYOUT_VERSION = 1
LAYOUT_KEY = "safebeat:layout"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: How Redis reports an ACL denial inside a Lua script (not as a NOPERM error).
_SCRIPT_DENIED = "can't run this command"
_REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
#: The key every namespace with a registered entry has (its entries' digests).
NAMESPACE_PATTERN = "safebeat:{*}:digest"
#: Rows one prune call deletes, so no single script blocks Redis for long.
PRUNE_BATCH = 1000


def _us(instant: datetime) -> str:
    return str((instant - _EPOCH) // timedelta(microseconds=1))


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
    running_since and paused."""
    anchors, defined, lasts, digests, schedules, running, paused = columns
    states = {}
    for i, name in enumerate(names):
        anchor, defined_at, digest = anchors[i], defined[i], digests[i]
        if anchor is None or defined_at is None or digest is None:
            continue  # not registered (or only partly, after an eviction)
        states[name] = EntryState(
            name=name,
            anchor=_instant(anchor),
            defined_at=_instant(defined_at),
            last_window=_maybe_instant(lasts[i]),
            digest=digest,
            schedule=schedules[i] or "",
            running_since=_maybe_instant(running[i]),
            paused=bool(paused[i]),
        )
    return states


class RedisStore:
    """Implements `safebeat.stores.base.Store` on Redis 6.2+ (one server, Sentinel or Cluster)."""

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
        # The newest window this process claimed per (namespace, entry): if Redis comes back
        # without them (a restart from an old snapshot), this replica still never claims
        # them twice.
        self._claimed_until: dict[tuple[str, str], datetime] = {}

    # --- connection and error boundary ----------------------------------------------------

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
        return self._scripts[script](keys=list(keys), args=list(args))

    # --- layout ---------------------------------------------------------------------------

    def migrate(self) -> int:
        """Record the key layout version; there is no schema to create in Redis."""
        with self._boundary("migrate") as client:
            client.set(LAYOUT_KEY, LAYOUT_VERSION, nx=True)
            return self._check_layout(client)

    def schema_version(self) -> int:
        """Return the recorded layout version (0: `migrate` never ran, or Redis was flushed)."""
        with self._boundary("read the layout version") as client:
            value = client.get(LAYOUT_KEY)
        return int(value) if value else 0

    expected_schema_version = LAYOUT_VERSION

    def checks(self) -> list[StoreCheck]:
        """Whether the server's eviction policy could delete claims."""
        policy, maxmemory = self.memory_policy()
        return [
            StoreCheck(
                "redis eviction",
                f"maxmemory-policy is {policy}",
                eviction_hazard(policy, maxmemory),
            )
        ]

    def memory_policy(self) -> tuple[str, int]:
        """(maxmemory-policy, maxmemory) of the server; of a cluster, the riskiest node's."""
        with self._boundary("read the eviction policy") as client:
            policies = memory_policies(client)
        return next((p for p in policies if eviction_hazard(*p)), policies[0])

    @staticmethod
    def _check_layout(client: Client) -> int:
        value = client.get(LAYOUT_KEY)
        version = int(value) if value else 0
        if version > LAYOUT_VERSION:
            raise StoreError(
                f"Redis holds safebeat's key layout version {version}, newer than this "
                f"safebeat understands ({LAYOUT_VERSION}); upgrade safebeat"
            )
        return version

    # --- the protocol ---------------------------------------------------------------------

    def clock(self) -> datetime:
        with self._boundary("read the clock") as client:
            seconds, micros = client.time()
        return _EPOCH + timedelta(seconds=int(seconds), microseconds=int(micros))

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        prefix = key_prefix(namespace)
        args: list[object] = [prefix]
        for definition in definitions:
            args += [definition.name, definition.digest, definition.schedule]
        with self._boundary("register entries"):
            _now, changed, *columns = self._run("register", [f"{prefix}:digest"], args)
        names = [d.name for d in definitions]
        pairs = dict(zip(changed[::2], changed[1::2], strict=True))
        return Registration(_states(names, columns), pairs)

    def states(self, namespace: str) -> dict[str, EntryState]:
        prefix = key_prefix(namespace)
        with self._boundary("load entry states"):
            names, *columns = self._run("states", [f"{prefix}:digest"], [prefix])
        return _states(names, columns)

    def tick(
        self,
        namespace: str,
        names: Collection[str],
        planner: Planner,
        *,
        replica: Replica,
        reclaim: Reclaim | None = None,
    ) -> TickResult | None:
        names = list(names)
        prefix = key_prefix(namespace)
        lock = f"{prefix}:lock"
        token = secrets.token_hex(8)
        with self._boundary("tick"):
            began = self._run("begin_tick", [lock], [prefix, token, self._lock_ttl_ms, *names])
            if began is None:
                return None
            started = time.monotonic()
            now_text, namespace_known, *columns = began
            try:
                states = _states(names, columns)
                if names and not namespace_known:
                    logger.warning(
                        "safebeat: Redis %s holds no entries of namespace %r: its keys were "
                        "flushed or evicted, or Redis restarted without persistence; "
                        "registering again (windows up to now count as decided)",
                        self.display_url,
                        namespace,
                    )
                now = _instant(now_text)
                plan = self._unclaimed_by_us(namespace, planner(now, states))
                if time.monotonic() - started > self._lock_ttl_ms / 3000:
                    # A long plan: keep the lock so others do not start the same tick.
                    self._run("extend_lock", [lock], [token, self._lock_ttl_ms])
                finished = self._run(
                    "finish_tick", [lock], self._finish_args(prefix, token, replica, plan, reclaim)
                )
            except BaseException:
                self._release(lock, token)
                raise
        _now, inserted, stale = finished
        claimed = [Claim(int(row[0]), row[1], _instant(row[2]), row[3], 1) for row in inserted]
        reclaimed = [
            Claim(int(row[0]), row[1], _instant(row[2]), row[3], int(row[4])) for row in stale
        ]
        for claim in claimed:
            key = (namespace, claim.entry)
            if key not in self._claimed_until or claim.window > self._claimed_until[key]:
                self._claimed_until[key] = claim.window
        return TickResult(now, states_after(states, plan), claimed, reclaimed, plan)

    def _unclaimed_by_us(self, namespace: str, plan: TickPlan) -> TickPlan:
        claims = [
            c
            for c in plan.claims
            if (namespace, c.entry) not in self._claimed_until
            or c.window > self._claimed_until[(namespace, c.entry)]
        ]
        if len(claims) == len(plan.claims):
            return plan
        logger.warning(
            "safebeat: Redis %s no longer knows %d window(s) this replica already claimed "
            "(did it restart from an older snapshot?); not claiming them again",
            self.display_url,
            len(plan.claims) - len(claims),
        )
        return replace(plan, claims=claims)  # the planner's own type, with all it said

    def _release(self, lock: str, token: str) -> None:
        try:
            self._run("release_lock", [lock], [token])
        except redis.exceptions.RedisError:
            logger.debug("safebeat: releasing the tick lock failed; it expires", exc_info=True)

    @staticmethod
    def _finish_args(
        prefix: str, token: str, replica: Replica, plan: TickPlan, reclaim: Reclaim | None
    ) -> list[object]:
        reclaim_entries = list(reclaim.entries) if reclaim else []
        args: list[object] = [
            prefix,
            token,
            replica.id,
            replica.host,
            replica.pid,
            len(plan.claims),
            len(plan.skips),
            len(plan.advances),
            len(reclaim_entries),
            "" if reclaim is None else _micros(reclaim.timeout),
            0 if reclaim is None else reclaim.limit,
        ]
        for claim in plan.claims:
            args += [claim.entry, _us(claim.window), claim.task_id, claim.task_name]
        for skip in plan.skips:
            count = "" if skip.count is None else skip.count
            args += [skip.entry, _us(skip.window), skip.reason, _us(skip.first), count]
        for name, window in plan.advances.items():
            args += [name, _us(window)]
        args += reclaim_entries
        return args

    def record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        if not sent and not failed:
            return
        prefix = key_prefix(namespace)
        args: list[object] = [prefix, len(sent), *sent]
        for row_id, error in failed.items():
            args += [row_id, error]
        with self._boundary("record publishing"):
            self._run("record_publish", [f"{prefix}:unsent"], args)

    def heartbeat(
        self, namespace: str, replica: Replica, version: str, definitions: Mapping[str, str]
    ) -> None:
        prefix = key_prefix(namespace)
        description = json.dumps(
            {
                "host": replica.host,
                "pid": replica.pid,
                "version": version,
                "definitions": dict(definitions),
            },
            sort_keys=True,
        )
        with self._boundary("heartbeat"):
            self._run("heartbeat", [f"{prefix}:heartbeats"], [prefix, replica.id, description])

    def replicas(self, namespace: str) -> list[ReplicaRecord]:
        prefix = key_prefix(namespace)
        with self._boundary("list replicas"):
            rows = self._run("replicas", [f"{prefix}:heartbeats"], [prefix])
        records = []
        for replica_id, description, started, beat in rows:
            if description is None:
                continue
            info = json.loads(description)
            records.append(
                ReplicaRecord(
                    replica=replica_id,
                    host=info["host"],
                    pid=int(info["pid"]),
                    version=info["version"],
                    started_at=_instant(started or beat),
                    heartbeat_at=_instant(beat),
                    definitions=info["definitions"],
                )
            )
        return records

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        prefix = key_prefix(namespace)
        with self._boundary("forget a replica"):
            self._run("forget_replica", [f"{prefix}:heartbeats"], [prefix, replica.id])

    def namespaces(self) -> list[str]:
        """Found by SCAN over every node (no index to keep up to date in the tick's path)."""
        found: set[str] = set()
        with self._boundary("list namespaces") as client:
            for key in client.scan_iter(match=NAMESPACE_PATTERN, count=1000):
                text = key.decode() if isinstance(key, bytes) else str(key)
                found.add(text[len("safebeat:{") : -len("}:digest")])
        return sorted(found)

    def history(
        self, namespace: str, entry: str | None = None, limit: int = 100
    ) -> list[DispatchRecord]:
        prefix = key_prefix(namespace)
        index = f"{prefix}:history" if entry is None else f"{prefix}:history:{entry}"
        with self._boundary("read history"):
            rows = self._run("history", [index], [prefix, limit])
        records = [_record(int(row_id), fields) for row_id, fields in rows if fields]
        records.sort(key=lambda r: (r.window, r.id), reverse=True)
        return records

    def set_paused(self, namespace: str, entry: str, paused: bool) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("pause an entry"):
            done = self._run("set_paused", [f"{prefix}:paused"], [prefix, entry, int(paused)])
        return bool(done)

    def claim_extra(
        self, namespace: str, claims: Sequence[NewClaim], *, replica: Replica, reason: str
    ) -> list[Claim]:
        if not claims:
            return []
        prefix = key_prefix(namespace)
        args: list[object] = [prefix, replica.id, replica.host, replica.pid, reason]
        for claim in claims:
            args += [claim.entry, _us(claim.window), claim.task_id, claim.task_name]
        with self._boundary("claim windows"):
            rows = self._run("claim_extra", [f"{prefix}:seq"], args)
        return [Claim(int(row[0]), row[1], _instant(row[2]), row[3], 1) for row in rows]

    def start_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        stale_after: timedelta,
    ) -> Start:
        prefix = key_prefix(namespace)
        with self._boundary("record an execution's start"):
            verdict = self._run(
                "start_execution",
                [_claim_key(prefix, entry, window)],
                [prefix, entry, worker, retries, _micros(stale_after)],
            )
        return Start(verdict)

    def finish_execution(
        self,
        namespace: str,
        entry: str,
        window: datetime,
        *,
        worker: str,
        retries: int,
        outcome: Outcome,
        runtime: timedelta,
        detail: str | None = None,
    ) -> None:
        prefix = key_prefix(namespace)
        with self._boundary("record an execution's end"):
            self._run(
                "finish_execution",
                [_claim_key(prefix, entry, window)],
                [prefix, entry, worker, retries, outcome.value, _micros(runtime), detail or ""],
            )

    def claim_effect(
        self, namespace: str, key: str, *, owner: str, keep_for: timedelta, task_id: str | None
    ) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("claim an effect key"):
            recorded = self._run(
                "claim_effect",
                [f"{prefix}:effect:{key}"],
                [prefix, owner, _micros(keep_for), task_id or ""],
            )
        return bool(recorded)

    def release_effect(self, namespace: str, key: str, *, owner: str) -> bool:
        prefix = key_prefix(namespace)
        with self._boundary("release an effect key"):
            released = self._run("release_effect", [f"{prefix}:effect:{key}"], [prefix, owner])
        return bool(released)

    def prune(self, namespace: str, before: datetime) -> int:
        prefix = key_prefix(namespace)
        deleted = 0
        with self._boundary("prune"):
            for script, key, args in (
                ("prune", f"{prefix}:age", [prefix, _us(before), PRUNE_BATCH]),
                ("prune_effects", f"{prefix}:effects", [PRUNE_BATCH]),
            ):
                while True:
                    batch = int(self._run(script, [key], args))
                    deleted += batch
                    if batch < PRUNE_BATCH:
                        break
            self._run("prune_replicas", [f"{prefix}:heartbeats"], [prefix, _us(before)])
        return deleted


def _claim_key(prefix: str, entry: str, window: datetime) -> str:
    """The key whose existence is the claim of `window` (see scripts.lua)."""
    return f"{prefix}:claim:{_us(window)}:{entry}"


def _micros(duration: timedelta) -> int:
    return duration // timedelta(microseconds=1)


def _record(row_id: int, flat: Sequence[str]) -> DispatchRecord:
    fields = dict(zip(flat[::2], flat[1::2], strict=True))

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
    )


__all__ = ["LAYOUT_VERSION", "RedisStore", "key_prefix"]
