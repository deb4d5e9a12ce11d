"""Which queues a publisher has declared on its broker connection.

kombu binds a copy of a message's queue before it looks in its declared cache, on every
message; safebeat declares each queue once per connection instead and skips it after.
"""

from __future__ import annotations

from typing import Any


class QueueDeclarations:
    """The queues declared on one live transport connection: a reconnect (a new
    connection) declares them again, as kombu's own cache does."""

    def __init__(self) -> None:
        self._on: object = None
        self._queues: set[str] = set()

    def declared(self, producer: Any, queue: str) -> bool:
        """Whether `queue` was declared on the producer's live transport connection
        (looked up without connecting)."""
        connection = getattr(producer.connection, "_connection", None)
        if connection is None or connection is not self._on:
            self._on, self._queues = connection, set()
        return queue in self._queues

    def add(self, queue: str) -> None:
        """Remember that `queue` is declared (after a message declared it)."""
        self._queues.add(queue)

    def forget(self) -> None:
        """After a connection error: declare every queue again on the next message."""
        self._on, self._queues = None, set()
