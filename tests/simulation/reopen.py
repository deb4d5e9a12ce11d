"""Reopen a fixed hole of issue 29 inside one simulation process, to prove a seed finds it.

A seed kept as a hole's regression must be able to fail: `--reopen "hole N"` puts the
rule back as it was before that hole's fix, patched into this process only (the shipped
package has no switch for it), and the seed must then report the hole. Each reopening
reverts its fix's commit as text where the rule lives in SQL or Lua, or swaps the one
function the fix changed; a revert that no longer applies (the fixed code moved or
changed) raises `Unreopenable`, so a regression test never passes on a patch that
silently did nothing.

- hole 1 (42adc00): the take-over counts a claim stale past the claim timeout whatever its
  run is doing, and clears a live run's lease (memory, SQLite, PostgreSQL, Redis);
- hole 2 (f27c112): a store error while recording a run's end only backs off; the lease
  stops at once (the worker hook, every store);
- hole 3 (717aad6): a delivery with higher retries than recorded starts (RUN) without
  looking at the lease or at how the run ended, and a take-over records its own lower
  retries (memory, SQLite, PostgreSQL, Redis);
- hole 4 (f2d9bf9): acks early, a deferred copy the broker refuses is rejected with
  requeue, which does nothing once the message was acknowledged: the window is lost (the
  worker hook, every store);
- hole 5 (a5bac35, eb5d888): SIGTERM while the tick waits for the publishing thread
  leaves the thread publishing the rest of the round, and a store error handing the next
  round back takes the SystemExit's place (beat, every store).
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from datetime import datetime
from typing import Any
from unittest import mock

from safebeat.record_rules import lease_alive
from safebeat.records import DispatchRecord, Start, Status

HOLES = ("hole 1", "hole 2", "hole 3", "hole 4", "hole 5")


class Unreopenable(RuntimeError):
    """The old rule cannot be put back: the fixed code it replaces is not where it was."""


Patch = AbstractContextManager[Any]


def _revert(texts: dict[str, str], fixed: str, old: str, count: int | None) -> Patch:
    """`texts` (a store's named SQL or Lua blocks) with `fixed` put back to `old`, which
    must occur `count` times in all (None: at least once, as in a helper every Lua
    script carries)."""
    found = sum(text.count(fixed) for text in texts.values())
    if found == 0 or (count is not None and found != count):
        raise Unreopenable(f"expected {count} of {fixed!r}, found {found}")
    return mock.patch.dict(
        texts, {name: text.replace(fixed, old) for name, text in texts.items() if fixed in text}
    )


# --- hole 1: the take-over clears a live run's lease ------------------------------------


def _old_unsent_and_stale(record: DispatchRecord, stale_before: datetime, now: datetime) -> bool:
    """Before 42adc00: claimed past the timeout is stale, whatever its run is doing."""
    del now
    return record.status is Status.CLAIMED and record.claimed_at < stale_before


_PG_ALIVE = (
    "\n       AND NOT coalesce(started_at IS NOT NULL AND finished_at IS NULL AND lease_until > "
    "%(now)s, false)",
    "\n              AND NOT coalesce(started_at IS NOT NULL AND finished_at IS NULL AND "
    "lease_until > %(now)s, false)",
    "\n        AND NOT coalesce(d.started_at IS NOT NULL AND d.finished_at IS NULL\n"
    "                         AND d.lease_until > %(now)s, false))",
)


def _hole_1(store: str) -> list[Patch]:
    if store == "memory":
        return [mock.patch("safebeat.stores.memory.unsent_and_stale", _old_unsent_and_stale)]
    if store == "sqlite":
        from safebeat.stores.sqlite.connection import Q

        alive = (
            "\n      AND NOT coalesce(started_at IS NOT NULL AND finished_at IS NULL "
            "AND lease_until > :now, 0)"
        )
        return [_revert(Q, alive, "", 1)]
    if store == "postgres":
        from safebeat.stores.postgres.cursors import Q

        # Each revert is applied to the texts the one before left, so chain them.
        texts = dict(Q)
        for fixed, old in zip(_PG_ALIVE, ("", "", ")"), strict=True):
            if sum(text.count(fixed) for text in texts.values()) != 1:
                raise Unreopenable(f"expected one {fixed!r} in the PostgreSQL queries")
            texts = {name: text.replace(fixed, old) for name, text in texts.items()}
        return [mock.patch.dict(Q, texts)]
    if store == "redis":
        from tests.simulation.redis_clock import SIM_SCRIPTS

        fixed = "tonumber(f[2]) < tonumber(stale_before) and not alive"
        return [_revert(SIM_SCRIPTS, fixed, "tonumber(f[2]) < tonumber(stale_before)", None)]
    raise Unreopenable(f"hole 1 on the {store} store")


# --- hole 2: a store error at a run's end only backs off --------------------------------


def _hole_2(store: str) -> list[Patch]:
    from safebeat.worker.leases import LeaseRenewer

    def release_at_once(self: LeaseRenewer, token: int, end: object) -> None:
        """Before f27c112: the end is not retried; the lease stops now."""
        del end
        self.release(token)

    return [mock.patch.object(LeaseRenewer, "finish_later", release_at_once)]


# --- hole 3: a retry's RUN ignores a live lease -----------------------------------------


def _old_decide_start(
    *,
    started_at: datetime | None,
    finished_at: datetime | None,
    outcome: object,
    lease_until: datetime | None,
    recorded_retries: int | None,
    retries: int,
    now: datetime,
    other_run_alive: bool = False,
) -> Start:
    """Before 717aad6: higher retries than recorded start, whatever the lease and the end."""
    del outcome
    if started_at is not None and retries <= (recorded_retries or 0):
        if finished_at is not None:
            return Start.DUPLICATE
        if lease_alive(lease_until, now):
            return Start.DEFER
        verdict = Start.TAKEOVER
    else:
        verdict = Start.RUN
    return Start.DEFER if other_run_alive else verdict


_PG_START_FIXED = """CASE WHEN started_at IS NOT NULL AND finished_at IS NOT NULL
                     AND (outcome IS DISTINCT FROM 'retry'
                          OR coalesce(retries, 0) >= %(retries)s) THEN 'duplicate'
                WHEN started_at IS NOT NULL AND finished_at IS NULL
                     AND lease_until > clock_timestamp() THEN 'defer'"""
_PG_START_OLD = """CASE WHEN started_at IS NOT NULL AND coalesce(retries, 0) >= %(retries)s
                     AND finished_at IS NOT NULL THEN 'duplicate'
                WHEN started_at IS NOT NULL AND coalesce(retries, 0) >= %(retries)s
                     AND lease_until > clock_timestamp() THEN 'defer'"""
_PG_RUN_FIXED = "WHEN started_at IS NULL OR finished_at IS NOT NULL THEN 'run'"
_PG_RUN_OLD = "WHEN started_at IS NULL OR coalesce(retries, 0) < %(retries)s THEN 'run'"

_LUA_START_FIXED = """if not fields[3] then
    verdict = 'run'
elseif fields[4] then
    -- Only an end that asked for a retry lets a later attempt (higher retries) start.
    if fields[7] ~= 'retry' or tonumber(retries) <= tonumber(fields[5] or '0') then
        redis.call('HINCRBY', row, 'duplicates', 1)
        return 'duplicate'
    end
    verdict = 'run'
elseif"""
_LUA_START_OLD = """if not fields[3] or tonumber(retries) > tonumber(fields[5] or '0') then
    verdict = 'run'
elseif fields[4] then
    redis.call('HINCRBY', row, 'duplicates', 1)
    return 'duplicate'
elseif"""


def _hole_3(store: str) -> list[Patch]:
    if store in ("memory", "sqlite"):
        # Both decide in Python, by the one rule (`DecidedStart`).
        return [mock.patch("safebeat.stores.executions.decide_start", _old_decide_start)]
    if store == "postgres":
        from safebeat.stores.postgres.cursors import Q

        texts = {"start_execution": Q["start_execution"]}
        for fixed, old in ((_PG_START_FIXED, _PG_START_OLD), (_PG_RUN_FIXED, _PG_RUN_OLD)):
            if texts["start_execution"].count(fixed) != 1:
                raise Unreopenable(f"expected one {fixed!r} in start_execution")
            texts["start_execution"] = texts["start_execution"].replace(fixed, old)
        return [mock.patch.dict(Q, texts)]
    if store == "redis":
        from tests.simulation.redis_clock import SIM_SCRIPTS

        return [_revert(SIM_SCRIPTS, _LUA_START_FIXED, _LUA_START_OLD, 1)]
    raise Unreopenable(f"hole 3 on the {store} store")


# --- hole 4: acks early, a refused deferral is lost -------------------------------------


def _hole_4(store: str) -> list[Patch]:
    from safebeat.worker import delivery

    def not_left_to_beat(*args: object) -> bool:
        """Before f2d9bf9: nothing is written; the hook rejects with requeue."""
        return False

    return [mock.patch.object(delivery, "_leave_to_beat", not_left_to_beat)]


# --- hole 5: SIGTERM does not stop the round --------------------------------------------

_TICK_FIXED = """        except BaseException as exc:
            if not isinstance(exc, Exception):
                # SystemExit from a signal handler, raised while this thread waited: the
                # round stops at its next message (close() would otherwise let the thread
                # publish the rest, which nobody records as sent).
                with suppress(Exception):
                    publishing.result(stop=True)
                if following is not None:
                    # A store error here must not take the SystemExit's place: the
                    # tick would back off and go on claiming after SIGTERM.
                    self._hand_back_after_error(following)
            elif following is not None:
                steps.hand_back(following)
            raise
"""
_TICK_OLD = """        except BaseException:
            if following is not None:
                steps.hand_back(following)
            raise
"""


def _hole_5(store: str) -> list[Patch]:
    from safebeat.beat import tick_rounds

    method = tick_rounds.TickRounds._publish_while_claiming
    source = textwrap.dedent(inspect.getsource(method))
    # The method's source at the indentation `dedent` leaves it (its body one level in).
    fixed, old = (textwrap.indent(textwrap.dedent(t), "    ") for t in (_TICK_FIXED, _TICK_OLD))
    if source.count(fixed) != 1:
        raise Unreopenable("TickRounds._publish_while_claiming no longer has the hole 5 fix")
    namespace: dict[str, Any] = dict(vars(tick_rounds))
    exec(compile(source.replace(fixed, old), "<hole 5>", "exec"), namespace)  # noqa: S102 - the method as it was, test-only
    return [
        mock.patch.object(
            tick_rounds.TickRounds, "_publish_while_claiming", namespace[method.__name__]
        )
    ]


_REOPENERS: dict[str, Callable[[str], list[Patch]]] = {
    "hole 1": _hole_1,
    "hole 2": _hole_2,
    "hole 3": _hole_3,
    "hole 4": _hole_4,
    "hole 5": _hole_5,
}


@contextmanager
def reopened(holes: tuple[str, ...], store: str) -> Iterator[None]:
    """Within this block, the rules of `holes` are as they were before their fixes, on
    `store`'s backend (raises Unreopenable if one cannot be put back)."""
    with ExitStack() as stack:
        for hole in holes:
            if hole not in _REOPENERS:
                raise Unreopenable(f"unknown hole {hole!r}; known: {', '.join(HOLES)}")
            for patch in _REOPENERS[hole](store):
                stack.enter_context(patch)
        yield
