"""The long-outage scenario: every replica stopped, the store's state moved hours back.

Moving everything the store knows of a namespace (entry states and dispatch rows) into
the past is, to the store, an outage that long: its clock is the only one beat reads.
The messages collected before the move are moved with it by the runner
(`Run.shifted`), so the count sees one timeline.
"""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import redis

from safebeat.stores.redis.base import key_prefix
from tests.chaos.counting import utc
from tests.chaos.crontabs import slots_of
from tests.chaos.runner import REDIS, Run


def _move_postgres_state_back(url: str, namespace: str, by: timedelta) -> None:
    """Move everything the PostgreSQL store knows of `namespace` `by` into the past: each
    entry's anchor, definition time and decided-until, each dispatch row's window and
    times. To the store, the replicas were stopped `by` longer than they were."""
    with psycopg.connect(url) as connection:
        connection.execute(
            "UPDATE safebeat_entry SET anchor = anchor - %(by)s, defined_at = defined_at - %(by)s,"
            " last_window = last_window - %(by)s WHERE namespace = %(namespace)s",
            {"by": by, "namespace": namespace},
        )
        connection.execute(
            "UPDATE safebeat_dispatch SET window_at = window_at - %(by)s,"
            " skipped_from = skipped_from - %(by)s, claimed_at = claimed_at - %(by)s,"
            " sent_at = sent_at - %(by)s WHERE namespace = %(namespace)s",
            {"by": by, "namespace": namespace},
        )


#: The same for the Redis store, on the key layout `safebeat/stores/redis/scripts.lua`
#: describes: the state hashes, each dispatch row's instants, the claim marker named by its
#: window, and the sorted sets scored by window or claim time. KEYS[1]: the prefix's
#: `:history` set. ARGV: the prefix, the shift in microseconds.
_REDIS_MOVE_BACK = """
local p, by = ARGV[1], tonumber(ARGV[2])
local function back(value) return string.format('%d', tonumber(value) - by) end
for _, name in ipairs({'anchor', 'defined', 'last'}) do
    local flat = redis.call('HGETALL', p .. ':' .. name)
    for i = 1, #flat, 2 do redis.call('HSET', p .. ':' .. name, flat[i], back(flat[i + 1])) end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local row = p .. ':row:' .. id
    local entry, window = unpack(redis.call('HMGET', row, 'entry', 'window'))
    for _, field in ipairs({'window', 'skipped_from', 'claimed_at', 'sent_at'}) do
        local value = redis.call('HGET', row, field)
        if value then redis.call('HSET', row, field, back(value)) end
    end
    local marker = p .. ':claim:' .. window .. ':' .. entry
    if redis.call('EXISTS', marker) == 1 then
        redis.call('RENAME', marker, p .. ':claim:' .. back(window) .. ':' .. entry)
    end
    redis.call('ZADD', p .. ':history', back(window), id)
    redis.call('ZADD', p .. ':history:' .. entry, back(window), id)
    for _, set in ipairs({':age', ':unsent'}) do
        local score = redis.call('ZSCORE', p .. set, id)
        if score then redis.call('ZADD', p .. set, back(score), id) end
    end
end
"""


def _move_redis_state_back(url: str, namespace: str, by: timedelta) -> None:
    """The same for the Redis store: one script, so no replica sees half of it."""
    prefix = key_prefix(namespace)
    client = redis.Redis.from_url(url)
    try:
        client.eval(
            _REDIS_MOVE_BACK, 1, f"{prefix}:history", prefix, by // timedelta(microseconds=1)
        )
    finally:
        client.close()


def _wait_drained(run: Run, limit: float) -> None:
    """Wait (at most `limit` s) until the collector has taken every message off the broker
    queues: what was sent before the stop is then stamped before the state moves back."""
    assert run.broker is not None
    client = redis.Redis.from_url(run.broker.url)
    try:
        deadline = time.time() + limit
        while any(client.llen(side.queue) for side in run.sides):
            assert time.time() < deadline, "the collector did not drain the broker queues"
            time.sleep(0.1)
    finally:
        client.close()
    time.sleep(0.1)  # the collector's last take, stamped as it returns


def _wait_caught_up(run: Run, limit: float, quiet: float = 2.0) -> None:
    """Wait (at most `limit` s) until every crontab entry has sent a message since the
    restart and no window older than the restart has come for `quiet` s."""
    assert run.collector is not None
    assert run.fault_over_at is not None
    restart, deadline = run.fault_over_at, time.time() + limit
    while time.time() < deadline:
        for side in run.safebeat_sides():
            after = [a for a in run.collector.arrivals(side.queue) if a.at > restart]
            late = [a.at for a in after if a.window and a.window.timestamp() <= restart]
            if not set(run.crontabs) <= {a.entry for a in after}:
                break
            if late and max(late) > time.time() - quiet:
                break
        else:
            run.event("every crontab entry caught up")
            return
        time.sleep(0.5)
    run.event(f"the catch-up did not end within {limit:g}s")


def _wait_minute_sent(run: Run, limit: float) -> None:
    """If a minute turned since the restart, wait (at most `limit` s) until every crontab
    entry with a slot at it has sent that window: a burst of thousands can take longer than
    the settle time on a loaded machine, and a window claimed but not yet sent when the
    run stops would count as missing."""
    assert run.collector is not None
    assert run.fault_over_at is not None
    minute = utc(time.time() // 60 * 60)
    if minute.timestamp() <= run.fault_over_at:
        return
    due = {name for name, spec in run.crontabs.items() if slots_of(spec).is_window(minute)}
    deadline = time.time() + limit
    while time.time() < deadline:
        if all(
            due <= {a.entry for a in run.collector.arrivals(side.queue) if a.window == minute}
            for side in run.safebeat_sides()
        ):
            run.event(f"every crontab window of {minute:%H:%M} UTC sent")
            return
        time.sleep(0.5)
    run.event(f"not every crontab window of {minute:%H:%M} UTC sent within {limit:g}s")


def long_outage(run: Run) -> None:
    """Stop every replica; move the store's state hours into the past; start them again."""
    outage = timedelta(hours=run.mode.outage_hours)
    stopping = time.monotonic()
    for side in run.sides:
        side.stop()
    codes = sorted({p.returncode for s in run.sides for r in s.everyone() for p in r.processes})
    run.fault(
        f"every replica stopped (SIGTERM, exit codes {codes}, "
        f"{time.monotonic() - stopping:.1f}s); {len(run.crontabs)} crontab entries"
    )
    _wait_drained(run, 60)
    moment = time.time()
    for side in run.safebeat_sides():
        assert side.store_url is not None
        move = _move_redis_state_back if side.kind == REDIS else _move_postgres_state_back
        move(side.store_url, side.namespace, outage)
    run.shifted = (moment, outage)
    run.fault(f"the stores' state moved {run.mode.outage_hours:g} h into the past")
    for side in run.sides:
        for slot in range(run.replicas):
            side.start(slot)
    run.fault_over("every replica started again")
    run.wait_resumed(60)
    _wait_caught_up(run, 60)
    if run.mode.scale > 1:
        # The published runs also see every crontab entry's next window, live; the short
        # mode sees one only when a minute turns by chance after the restart.
        run.sleep(60 - time.time() % 60)
        run.event("a minute turned after the catch-up: every crontab entry has a live window")
    _wait_minute_sent(run, 90)
    run.sleep(run.mode.settle + 1.0)
    _wait_minute_sent(run, 90)  # a minute that turned meanwhile
