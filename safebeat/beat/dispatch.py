"""Publishing claimed windows, the one way beat and the operator tools both use.

A `Dispatcher` publishes claims (with their deterministic task ids) and records the
outcome in the store in one call. It owns the rules of publishing: nothing is handed to
the broker once a claim is too old to publish safely, messages go out in batches where
the transport can batch, kombu's reconnect-and-retry is bounded to fit the time left,
and "the broker is down" (`safebeat.beat.broker`) leaves the claims unsent, to be
re-published with the same ids, and starts the broker backoff. The claims a dispatch
stops before handing to the transport are handed back to the store at once
(`TickStore.release_claims`), so any replica re-publishes them at its next take-over pass
instead of waiting `safebeat_claim_timeout`; a claim that was handed over and may have
reached the broker waits the timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from safebeat.backoff import Backoff
from safebeat.beat.broker import connection_errors
from safebeat.beat.publishing import Publisher
from safebeat.entries import Entry
from safebeat.errors import StoreError
from safebeat.identity import Replica, format_window
from safebeat.records import Claim
from safebeat.stores.protocols import TickStore

# Beat's log lines, under the logger docs/operations.md names for them.
logger = logging.getLogger("safebeat.scheduler")


class _TooLate(Exception):
    """The claims left are too old to publish safely from this process."""


@dataclass(frozen=True)
class Dispatched:
    """What one dispatch did with its claims, in their order.

    `sent`: published and recorded sent; `failed`: claim id -> error of messages that
    cannot be published (recorded failed); `unsent`: left claimed (the broker was down,
    or they grew too old), for a beat replica to re-publish: at its next take-over pass
    those of them in `released` (never handed to the transport, handed back to the
    store), after safebeat_claim_timeout the others (handed over, delivery uncertain);
    `broker_error`: what the broker raised, if it was down.
    """

    sent: Sequence[Claim] = ()
    failed: Mapping[int, str] = field(default_factory=dict)
    unsent: Sequence[Claim] = ()
    broker_error: BaseException | None = None
    released: Sequence[Claim] = ()


@dataclass
class Sending:
    """What `Dispatcher.send` did: claim ids flushed to the broker (`sent`), claim id ->
    error of those that cannot be published (`failed`), every claim id passed to the
    producer whatever came of it (`handed_over`), and the broker's error if it was down."""

    sent: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    handed_over: set[int] = field(default_factory=set)
    broker_error: BaseException | None = None


def can_batch(producer: Any) -> bool:
    """Whether the producer's transport buffers publishes (kombu's Redis transport does)."""
    return hasattr(producer, "batch") and bool(getattr(producer, "supports_batch_publish", False))


def retry_policy(connection: Any, seconds_left: float) -> dict[str, float | int]:
    """kombu's retry for one message: one reconnect, and only if it fits in the time left.

    A reconnect can take the broker's connect timeout; a publish that completes after
    another replica has taken the claim over would be a second copy. Past one retry,
    the claim stays unsent and the backoff and re-publish take over.
    """
    connect_timeout = float(getattr(connection, "connect_timeout", None) or 4.0)
    retries = 1 if seconds_left > 2 * connect_timeout else 0
    return {"max_retries": retries, "interval_start": 0, "interval_step": 0, "interval_max": 0}


def _connected(connection: Any) -> bool:
    try:
        return bool(connection.connected)
    except Exception:  # noqa: BLE001 - a transport that cannot tell is checked by connecting
        return False


class Dispatcher:
    """Publishes claimed windows for one process and records what became of them.

    `claim_timeout` is the store's `safebeat_claim_timeout`: past it another replica
    re-publishes an unsent claim, so nothing is handed to the broker after half of it
    from the claim. `monotonic` measures that (pair it with the store's clock in tests).
    Messages are built and sent by `publisher` (by default a `Publisher` of `app`).
    """

    #: Messages buffered per flush where the transport can batch publishes.
    chunk = 500

    def __init__(
        self,
        app: Any = None,
        *,
        claim_timeout: timedelta,
        replica: Replica,
        monotonic: Callable[[], float] = time.monotonic,
        publisher: Publisher | None = None,
    ) -> None:
        self.publisher = publisher or Publisher(app)
        self.backoff = Backoff()
        self._claim_timeout = claim_timeout
        self._replica = replica
        self._monotonic = monotonic

    def can_publish(self, connection: Any) -> bool:
        """Whether this process can publish now: asked before it claims or takes over anything.

        False during the broker backoff. After a broker failure, or before the first
        connection, it connects first (one attempt, bounded by the broker's connect
        timeout); a replica that reaches the store but not the broker then claims nothing
        and takes over nothing, so the windows stay free for the replicas that can send
        them. While the connection is up and nothing failed, it costs nothing. After a
        failure the old connection is closed first: a transport may still call a dead
        connection "connected" (kombu's Redis transport does), and only a new one proves
        the broker answers. A producer on the old connection must then be made anew.
        """
        now = self._monotonic()
        if self.backoff.waiting(now):
            return False
        if not self.backoff.failures and _connected(connection):
            return True
        broker_down = connection_errors(connection)
        timeout = float(getattr(connection, "connect_timeout", None) or 4.0)
        if self.backoff.failures:
            with suppress(Exception):  # closing a broken connection may fail too
                connection.close()
        try:
            connection.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, interval_max=0, timeout=timeout
            )
        except broker_down as exc:
            delay = self.backoff.failed(self._monotonic())
            logger.warning(
                "safebeat: broker unreachable (%s); claiming nothing, checking again in %.1fs",
                exc,
                delay,
            )
            return False
        return True

    def dispatch(
        self,
        store: TickStore,
        namespace: str,
        claims: Sequence[Claim],
        *,
        entries: Mapping[str, Entry],
        connection: Any,
        producer: Callable[[], Any],
        claimed_at: float,
    ) -> Dispatched:
        """Publish `claims` (claimed at monotonic `claimed_at`) and record the outcome:
        `send`, then `settle`."""
        if not claims:
            return Dispatched()
        sending = self.send(
            claims,
            entries=entries,
            connection=connection,
            producer=producer,
            claimed_at=claimed_at,
        )
        return self.settle(store, namespace, claims, sending)

    def send(
        self,
        claims: Sequence[Claim],
        *,
        entries: Mapping[str, Entry],
        connection: Any,
        producer: Callable[[], Any],
        claimed_at: float,
        stop: Callable[[], bool] = lambda: False,
    ) -> Sending:
        """Hand `claims` (claimed at monotonic `claimed_at`) to the broker; touches no store,
        so it may run on a thread of its own while the store is busy with something else.

        Where the transport can batch, claims go out in chunks of `chunk`, each flushed
        before its claims count as sent; a chunk that fails to flush stays claimed.
        `producer` is called inside the broker-error boundary (getting it may connect).
        It stops early when the broker is down, when the claims grow too old, or once
        `stop()` says so (checked before each chunk).
        """
        sending = Sending()
        broker_down = connection_errors(connection)
        publish_until = claimed_at + self._claim_timeout.total_seconds() / 2
        start = 0
        while start < len(claims) and not stop():
            try:
                current = producer()
                batching = can_batch(current)
                chunk = claims[start : start + (self.chunk if batching else 1)]
                with current.batch(max_size=len(chunk) + 1) if batching else nullcontext():
                    handed = self._send_chunk(
                        chunk,
                        current,
                        entries=entries,
                        connection=connection,
                        failed=sending.failed,
                        handed_over=sending.handed_over,
                        broker_down=broker_down,
                        publish_until=publish_until,
                    )
                    if self._monotonic() > publish_until:
                        raise _TooLate  # discards the buffered chunk unsent
            except _TooLate:
                logger.warning(
                    "safebeat: %d claim(s) are too old to publish safely from here; "
                    "they will be re-published by the next replica that ticks",
                    len(claims) - start,
                )
                break
            except broker_down as exc:
                sending.broker_error = exc
                self.publisher.forget_declarations()
                self.backoff.failed(self._monotonic())
                break
            start += len(chunk)
            sending.sent.extend(handed)
            if handed:
                self.backoff.succeeded()
        return sending

    def settle(
        self, store: TickStore, namespace: str, claims: Sequence[Claim], sending: Sending
    ) -> Dispatched:
        """Record what `send` did with `claims` in the store, and hand back the claims it
        never handed to the transport (none handed over, for claims never sent at all).

        A claim handed over counts as maybe delivered: the one whose publish raised, and
        every claim of a chunk whose flush failed (kombu: "delivery is uncertain", the
        pipeline may have run in part). Those wait safebeat_claim_timeout.
        """
        if not claims:
            return Dispatched()
        sent, failed = sending.sent, sending.failed
        store.record_publish(namespace, sent, failed)
        done = set(sent)
        unsent = [claim for claim in claims if claim.id not in done and claim.id not in failed]
        return Dispatched(
            sent=[claim for claim in claims if claim.id in done],
            failed=failed,
            unsent=unsent,
            broker_error=sending.broker_error,
            released=self._hand_back(
                store, namespace, [c for c in unsent if c.id not in sending.handed_over]
            ),
        )

    def _hand_back(self, store: TickStore, namespace: str, claims: Sequence[Claim]) -> list[Claim]:
        """Hand `claims` (never handed to the transport) back to the store; return them,
        or none if the store could not be told (they then wait the claim timeout)."""
        if not claims:
            return []
        try:
            store.release_claims(
                namespace, claims, replica=self._replica, timeout=self._claim_timeout
            )
        except StoreError as exc:
            logger.warning(
                "safebeat: could not hand back %d claim(s) never sent (%s); they will be "
                "re-published after safebeat_claim_timeout",
                len(claims),
                exc,
            )
            return []
        return list(claims)

    def _send_chunk(
        self,
        chunk: Sequence[Claim],
        producer: Any,
        *,
        entries: Mapping[str, Entry],
        connection: Any,
        failed: dict[int, str],
        handed_over: set[int],
        broker_down: tuple[type[BaseException], ...],
        publish_until: float,
    ) -> list[int]:
        """Send each claim; return the ids the producer took (each is added to
        `handed_over` before it is sent, so one whose send raised counts too).

        Broker errors propagate; so does `_TooLate` once `publish_until` has passed.
        """
        handed: list[int] = []
        for claim in chunk:
            left = publish_until - self._monotonic()
            if left < 0:
                raise _TooLate
            entry = entries.get(claim.entry)
            if entry is None:
                failed[claim.id] = f"entry {claim.entry!r} is not defined on {self._replica.id}"
                continue
            if logger.isEnabledFor(logging.INFO):  # spares formatting a burst's windows
                logger.info(
                    "Scheduler: Sending due task %s (%s) for window %s",
                    entry.name,
                    entry.task,
                    format_window(claim.window),
                )
            handed_over.add(claim.id)
            try:
                self.publisher.send(
                    producer, entry, claim, retry_policy=retry_policy(connection, left)
                )
            except broker_down:
                raise
            except Exception as exc:
                failed[claim.id] = f"{type(exc).__name__}: {exc}"
                logger.error(
                    "safebeat: entry %r: publishing window %s failed: %s",
                    entry.name,
                    format_window(claim.window),
                    exc,
                    exc_info=True,
                )
            else:
                handed.append(claim.id)
        return handed
