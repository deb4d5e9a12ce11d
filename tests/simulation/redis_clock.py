"""The Redis store on the simulator's clock: its scripts read "now" from a key, not TIME.

The scripts take "now" from one helper, `now_us()`, which calls Redis `TIME`. This store
registers the same scripts with that helper reading `SIM_NOW` (microseconds since the
epoch, as text), which the simulator sets; everything else in them runs unchanged.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from safebeat.stores.redis import SCRIPTS, RedisStore

#: The key holding the simulated time (in the simulator's own Redis server).
SIM_NOW = "safebeat-sim:now"

_TIME_HELPER = """local function now_us()
    local t = redis.call('TIME')
    return t[1] .. string.format('%06d', tonumber(t[2]))
end"""
_SIM_HELPER = f"""local function now_us()
    return redis.call('GET', '{SIM_NOW}')
end"""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _on_sim_clock(source: str) -> str:
    if _TIME_HELPER not in source:
        raise RuntimeError(
            "the Redis scripts no longer read TIME in now_us(): update the simulator"
        )
    return source.replace(_TIME_HELPER, _SIM_HELPER)


SIM_SCRIPTS = {name: _on_sim_clock(source) for name, source in SCRIPTS.items()}


def _micros(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


class SimRedisStore(RedisStore):
    """`RedisStore` whose "now" is `set_now`'s."""

    def _connection(self) -> Any:
        fresh = self._client is None
        client = super()._connection()
        if fresh:
            self._scripts = {name: client.register_script(s) for name, s in SIM_SCRIPTS.items()}
        return client

    def set_now(self, now: datetime) -> None:
        with self._boundary("set the simulated clock") as client:
            client.set(SIM_NOW, str(_micros(now)))

    def clock(self) -> datetime:
        with self._boundary("read the clock") as client:
            micros = int(client.get(SIM_NOW))
        return _EPOCH + timedelta(microseconds=micros)
