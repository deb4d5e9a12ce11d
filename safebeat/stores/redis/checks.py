"""Startup checks of a Redis server: settings that could silently lose safebeat's claims."""

from __future__ import annotations

import logging

import redis.exceptions

from safebeat.config import RedisEviction
from safebeat.errors import StoreError
from safebeat.stores.redis.connection import Client

logger = logging.getLogger("safebeat.stores.redis")


def eviction_hazard(policy: str, maxmemory: int) -> str | None:
    """Say why `policy` can evict safebeat's keys, or None when it cannot.

    Only the tick lock has a TTL, so `volatile-*` policies and `noeviction` leave claims
    alone; `allkeys-*` may delete any key once `maxmemory` is reached, and an evicted
    claim is a window that can be claimed, and sent, a second time.
    """
    if not policy.startswith("allkeys-"):
        return None
    limit = f"maxmemory is {maxmemory} bytes" if maxmemory else "maxmemory is not set yet"
    return (
        f"maxmemory-policy is {policy} ({limit}): Redis may evict safebeat's claim keys, "
        "and an evicted claim can be dispatched again; use noeviction (or a volatile-* "
        "policy) for the database safebeat uses"
    )


def memory_policies(client: Client) -> list[tuple[str, int]]:
    """(maxmemory-policy, maxmemory) of the server, or of every node of a cluster."""
    info = client.info("memory")
    # A cluster client answers per node, with a dict per node.
    nodes = info.values() if info and all(isinstance(v, dict) for v in info.values()) else [info]
    return [
        (str(node.get("maxmemory_policy", "noeviction")), int(node.get("maxmemory", 0)))
        for node in nodes
    ]


def check_eviction(client: Client, mode: RedisEviction, display_url: str) -> None:
    """Report (warn), refuse (StoreError) or ignore an eviction policy that can lose claims."""
    if mode == "ignore":
        return
    try:
        policies = memory_policies(client)
    except redis.exceptions.ResponseError as exc:  # INFO not allowed for this ACL user
        logger.warning(
            "safebeat: cannot read the eviction policy of Redis %s (%s); make sure it is "
            "noeviction or volatile-*",
            display_url,
            exc,
        )
        return
    for policy, maxmemory in policies:
        hazard = eviction_hazard(policy, maxmemory)
        if hazard is None:
            continue
        if mode == "refuse":
            raise StoreError(
                f"Redis store {display_url}: {hazard} (safebeat_redis_eviction='refuse')"
            )
        logger.warning("safebeat: Redis store %s: %s", display_url, hazard)
        return
