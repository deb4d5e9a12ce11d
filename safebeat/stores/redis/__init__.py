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
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

try:
    import redis
    import redis.exceptions
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "safebeat's Redis store needs redis-py: pip install 'safebeat[redis]'"
    ) from exc

from safebeat.errors import StoreError, TickTooLong
from safebeat.identity import Replica
from safebeat.record_rules import states_after, take_over_page
from safebeat.records import (
    Claim,
    Definition,
    Reclaim,
    ReclaimPage,
    Registration,
    StaleClaim,
    TickPlan,
    TickResult,
)
from safebeat.stores.protocols import StoreCheck
from safebeat.stores.pruning import in_batches
from safebeat.stores.redis.admin import RedisAdmin
from safebeat.stores.redis.base import (
    HISTORY_SLICE,
    LAYOUT_KEY,
    LAYOUT_VERSION,
    SCRIPTS,
    SLICE,
    _instant,
    _micros,
    _states,
    _us,
    key_prefix,
    logger,
)
from safebeat.stores.redis.checks import eviction_hazard, memory_policies
from safebeat.stores.redis.connection import Client
from safebeat.stores.redis.executions import RedisExecutions
from safebeat.stores.ticking import Heartbeat, Release, TickAdapter, TickCall

#: Rows one prune call deletes, so no single script blocks Redis for long.
PRUNE_BATCH = 1000


class RedisStore(TickAdapter, RedisExecutions, RedisAdmin):
    """Implements `safebeat.stores.protocols.Store` on Redis 6.2+ (one server, Sentinel or
    Cluster): client and boundary in `base.py`, operator reads in `admin.py`, executions
    and effects in `executions.py`, beat's side (layout, register, tick, heartbeat,
    prune) here."""

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

    def register(
        self, namespace: str, definitions: Sequence[Definition], replica: Replica
    ) -> Registration:
        """Register in slices of `SLICE` definitions, one script each, so no
        script holds Redis for long (others would get `BUSY`, and a client could time out
        on it); every slice anchors its new entries at the instant the first one read."""
        prefix = key_prefix(namespace)
        instant = ""
        changed: dict[str, str] = {}
        with self._boundary("register entries") as client:
            for start in range(0, len(definitions), SLICE):
                part = definitions[start : start + SLICE]
                args: list[object] = [prefix, instant]
                for definition in part:
                    args += [definition.name, definition.digest, definition.schedule]
                instant, pairs = self._run("register", [f"{prefix}:digest"], args)
                changed.update(zip(pairs[::2], pairs[1::2], strict=True))
            self._migrate_leases(client, prefix)
            self._migrate_dispatched(client, prefix)
        return Registration(changed)

    def _migrate_leases(self, client: Client, prefix: str) -> None:
        """Once per namespace, in slices of entries: the leases of runs an earlier release
        started (before the take-over found dead runs through P:leases) go there."""
        done = f"{prefix}:leases:migrated"
        self._in_slices(
            client, prefix, "migrate_leases", [f"{prefix}:leases"], done=done, size=SLICE
        )

    def _migrate_dispatched(self, client: Client, prefix: str) -> None:
        """Once per namespace, outside any tick: the claimed and sent rows an earlier
        release wrote go to P:dispatched:<entry>, where states read the newest dispatched
        window. Each script reads the whole history of `HISTORY_SLICE` entries, so slices
        are small."""
        done = f"{prefix}:dispatched:migrated"
        self._in_slices(client, prefix, "migrate_dispatched", [done], done=done, size=HISTORY_SLICE)

    def _in_slices(
        self, client: Client, prefix: str, script: str, keys: list[str], *, done: str, size: int
    ) -> None:
        """Run the migration `script` over the namespace's entries, `size` at a time (the
        last call told it is the last: it sets `done`), unless `done` is set already."""
        if client.exists(done):
            return
        names = sorted(client.hkeys(f"{prefix}:digest"))
        for start in range(0, len(names), size) or [0]:
            last = int(start + size >= len(names))
            part = names[start : start + size]
            self._run(script, keys, [prefix, last, *part])

    def _tick(self, call: TickCall) -> TickResult | None:
        namespace, names, replica, reclaim = call.namespace, call.names, call.replica, call.reclaim
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
                plan = self._unclaimed_by_us(namespace, call.planner(now, states))
                if time.monotonic() - started > self._lock_ttl_ms / 3000:
                    # A long plan: keep the lock so others do not start the same tick.
                    self._run("extend_lock", [lock], [token, self._lock_ttl_ms])
                finished = self._run(
                    "finish_tick", [lock], self._finish_args(prefix, token, replica, plan, reclaim)
                )
            except BaseException:
                self._release(lock, token)
                raise
        if finished is None:
            raise TickTooLong(
                f"Redis store {self.display_url}: the tick lock of namespace {namespace!r} "
                f"expired while this replica planned {len(names)} entries (the tick took "
                "longer than safebeat_lock_timeout); it wrote nothing and plans again from "
                "the current state"
            )
        _now, inserted, stale = finished
        claimed = [Claim(int(row[0]), row[1], _instant(row[2]), row[3], 1) for row in inserted]
        reclaimed: list[Claim] = []
        page: ReclaimPage | None = None
        if reclaim is not None:
            reclaimed, page = self._take_over(prefix, replica, reclaim, stale)
        until = self._claimed_until.setdefault(namespace, {})
        for claim in claimed:
            if claim.entry not in until or claim.window > until[claim.entry]:
                until[claim.entry] = claim.window
        return TickResult(now, states_after(states, plan), claimed, reclaimed, plan, page)

    def _take_over(
        self, prefix: str, replica: Replica, reclaim: Reclaim, stale: list[list[Any]]
    ) -> tuple[list[Claim], ReclaimPage]:
        """Take over those of the page of `stale` claims (id, entry, claimed_at; oldest
        first) that `take_over_page` chooses: one script, each row only while still stale."""
        rows = [StaleClaim(int(row[0]), row[1], _instant(row[2])) for row in stale]
        ids, page = take_over_page(reclaim, rows)
        if not ids:
            return [], page
        who = [replica.id, replica.host, replica.pid, _micros(reclaim.timeout)]
        with self._boundary("take over stale claims"):
            taken = self._run("take_over", [f"{prefix}:unsent"], [prefix, *who, *ids])
        return [Claim(int(r[0]), r[1], _instant(r[2]), r[3], int(r[4])) for r in taken], page

    def _unclaimed_by_us(self, namespace: str, plan: TickPlan) -> TickPlan:
        until = self._claimed_until.get(namespace, {})
        claims = [c for c in plan.claims if c.entry not in until or c.window > until[c.entry]]
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
        args: list[object] = [
            prefix,
            token,
            replica.id,
            replica.host,
            replica.pid,
            len(plan.claims),
            len(plan.skips),
            len(plan.advances),
            "" if reclaim is None else _micros(reclaim.timeout),
            *_page_args(reclaim),
        ]
        for claim in plan.claims:
            args += [claim.entry, _us(claim.window), claim.task_id, claim.task_name]
        for skip in plan.skips:
            count = "" if skip.count is None else skip.count
            args += [skip.entry, _us(skip.window), skip.reason, _us(skip.first), count]
        for name, window in plan.advances.items():
            args += [name, _us(window)]
        return args

    def _record_publish(
        self, namespace: str, sent: Sequence[int], failed: Mapping[int, str]
    ) -> None:
        prefix = key_prefix(namespace)
        args: list[object] = [prefix, len(sent), *sent]
        for row_id, error in failed.items():
            args += [row_id, error]
        with self._boundary("record publishing"):
            self._run("record_publish", [f"{prefix}:unsent"], args)

    def _release_claims(self, namespace: str, release: Release) -> int:
        prefix = key_prefix(namespace)
        args: list[object] = [prefix, release.replica, _micros(release.age)]
        for row_id, attempts in release.attempts.items():
            args += [row_id, attempts]
        with self._boundary("hand back unsent claims"):
            return int(self._run("release_claims", [f"{prefix}:unsent"], args))

    #: `_heartbeat` applies a delta (`Heartbeat.removed`): beat sends one after a change.
    heartbeat_deltas = True

    def _heartbeat(self, beat: Heartbeat) -> bool:
        prefix = key_prefix(beat.namespace)
        replica = beat.replica
        if beat.removed is not None:
            changed = json.dumps(dict(beat.definitions or {}))
            args = [prefix, replica.id, beat.version, changed, json.dumps(sorted(beat.removed))]
            with self._boundary("heartbeat"):
                return bool(self._run("patch_definitions", [f"{prefix}:heartbeats"], args))
        if beat.definitions is None:
            with self._boundary("heartbeat"):
                return bool(self._run("alive", [f"{prefix}:heartbeats"], [prefix, replica.id]))
        description = json.dumps(
            {
                "host": replica.host,
                "pid": replica.pid,
                "version": beat.version,
                "definitions": dict(beat.definitions),
            },
            sort_keys=True,
        )
        with self._boundary("heartbeat"):
            self._run("heartbeat", [f"{prefix}:heartbeats"], [prefix, replica.id, description])
        return True

    def forget_replica(self, namespace: str, replica: Replica) -> None:
        prefix = key_prefix(namespace)
        with self._boundary("forget a replica"):
            self._run("forget_replica", [f"{prefix}:heartbeats"], [prefix, replica.id])

    def prune(self, namespace: str, before: datetime, *, budget: timedelta | None = None) -> int:
        """Dispatch rows in scripts of `PRUNE_BATCH` (`pruning.in_batches`), then every
        expired effect key and old audit record, in scripts of as many, and old replicas."""
        prefix = key_prefix(namespace)
        with self._boundary("prune"):

            def delete_batch(batch: int) -> int:
                return int(self._run("prune", [f"{prefix}:age"], [prefix, _us(before), batch]))

            deleted = in_batches(delete_batch, batch=PRUNE_BATCH, budget=budget)
            for script, key, args in (
                ("prune_effects", f"{prefix}:effects", [PRUNE_BATCH]),
                ("prune_audit", f"{prefix}:audit", [prefix, _us(before), PRUNE_BATCH]),
            ):
                while True:
                    batch = int(self._run(script, [key], args))
                    if script == "prune_effects":  # prune counts dispatch rows and effect keys
                        deleted += batch
                    if batch < PRUNE_BATCH:
                        break
            self._run("prune_replicas", [f"{prefix}:heartbeats"], [prefix, _us(before)])
        return deleted


def _page_args(reclaim: Reclaim | None) -> list[object]:
    """The take-over page of `finish_tick`: where it starts (claimed_at in us, '' for the
    oldest; id) and how many stale claims it reads."""
    if reclaim is None:
        return ["", 0, 0]
    if reclaim.after is None:
        return ["", 0, reclaim.page]
    return [_us(reclaim.after.claimed_at), reclaim.after.id, reclaim.page]


__all__ = ["LAYOUT_VERSION", "SCRIPTS", "SLICE", "RedisStore", "key_prefix"]
