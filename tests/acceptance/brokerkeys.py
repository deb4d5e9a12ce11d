"""Broker settings shared by the acceptance apps whose workers consume from Redis.

kombu's Redis transport keeps the messages a worker has taken but not acknowledged under
server-wide keys (`unacked`, `unacked_index`, `unacked_mutex`). A worker a test SIGKILLs
leaves its message there, outside the run's names, where no cleanup finds it. Named after
the test's queue, which carries the run's tag, they are the run's own keys.
"""

from __future__ import annotations

from typing import Any


def redis_transport_options(queue: str) -> dict[str, Any]:
    """`broker_transport_options` that keep unacknowledged messages under `queue`'s name
    (other transports ignore them)."""
    return {
        "unacked_key": f"{queue}.unacked",
        "unacked_index_key": f"{queue}.unacked_index",
        "unacked_mutex_key": f"{queue}.unacked_mutex",
    }
