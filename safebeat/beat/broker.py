"""What "the broker is down" means, for every place that publishes windows.

A publish that fails with one of these errors leaves its claim unsent: a beat replica
re-publishes it with the same task id after `safebeat_claim_timeout`. Any other error
belongs to the message (it cannot be encoded or routed) and is recorded on its row.
"""

from __future__ import annotations

import logging
from typing import Any

import kombu.exceptions
from kombu.exceptions import OperationalError

logger = logging.getLogger("safebeat.broker")


def connection_errors(connection: Any) -> tuple[type[BaseException], ...]:
    """The exceptions that mean `connection`'s broker could not take a message.

    kombu raises OperationalError when it gives up connecting, and (5.7+)
    BatchPublishError when a batch flush failed with its delivery uncertain; the
    transport adds its own (redis-py's, amqp's). All of them leave the claims unsent.
    """
    errors: tuple[type[BaseException], ...] = (ConnectionError, OSError, OperationalError)
    batch_error = getattr(kombu.exceptions, "BatchPublishError", None)
    if batch_error is not None:
        errors += (batch_error,)
    try:
        errors += tuple(connection.connection_errors)
    except Exception:  # noqa: BLE001 - the transport could not even be loaded
        logger.debug("safebeat: could not read the transport's connection errors")
    return errors


def app_connection_errors(app: Any) -> tuple[type[BaseException], ...]:
    """`connection_errors` of the broker `app` publishes to (nothing connects)."""
    connection = app.connection_for_write()
    try:
        return connection_errors(connection)
    finally:
        connection.release()
