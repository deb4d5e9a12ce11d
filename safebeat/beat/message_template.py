"""An entry's Celery message built once, filled in per window, published through kombu.

Celery builds every message from scratch: the protocol headers, the route, the queue's
exchange and delivery mode, the serialized body. For a periodic entry all of that is the
same from one window to the next except the task id (`id`, `root_id`, `correlation_id`),
the `safebeat_window` header and, for a task with its own `expires`, the expiry. A
`MessageShape` keeps what `send_task_message` would hand to `producer.publish` for the
first window of a task with given options, shared by every entry with that task and those
options; each entry's `MessageTemplate` adds its serialized arguments and their reprs, and
each window merges that with the window's headers and fills in those few fields.

It is taken only where that is exact (`Publisher` decides): task protocol 2, no
`before_task_publish`/`after_task_publish`/`task_sent` receivers, no `task-sent` event,
static routes, arguments that are not lazy, and entry headers that leave Celery's own
`id`, `root_id` and `expires` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from datetime import timezone as datetime_timezone
from typing import Any

from celery import signals
from celery.utils.time import is_naive, maybe_make_aware
from kombu import serialization

from safebeat.identity import WINDOW_HEADER

# Typed in some kombu releases and untyped in others: called as Any, so the type check
# passes the same way on every release the package supports.
_dumps: Any = serialization.dumps

#: The headers a template fills in per window; an entry's own header of one of these
#: names would override Celery's, so such an entry is not templated.
PER_WINDOW_HEADERS = frozenset({"id", "root_id", "expires"})


def publish_receivers() -> bool:
    """Whether anything listens to Celery's publish signals (then Celery must publish)."""
    return bool(
        signals.before_task_publish.receivers
        or signals.after_task_publish.receivers
        or signals.task_sent.receivers
    )


class _Capture:
    """Stands in for a producer: keeps what `send_task_message` asks it to publish."""

    body: Any = None
    options: dict[str, Any] | None = None

    def publish(self, body: Any, **options: Any) -> None:
        self.body, self.options = body, options


@dataclass(frozen=True)
class MessageShape:
    """What the messages of every entry with one task and the same options share."""

    protocol_headers: Mapping[str, Any]  # as create_task_message made them
    options: Mapping[str, Any]  # producer.publish keywords but the headers
    embed: Any  # the body's third part (callbacks, errbacks, chain, chord)
    serializer: str | None
    expires: float | str | datetime | None  # the task's own expiry, computed per window
    retry_policy: Mapping[str, Any]  # task_publish_retry_policy, merged as Celery merges it
    queue: str | None  # the queue its messages declare, once per connection

    @classmethod
    def capture(
        cls,
        app: Any,
        name: str,
        message: Any,
        routed: Mapping[str, Any],
        *,
        expires: float | str | datetime | None,
    ) -> MessageShape | None:
        """Run `send_task_message` for `message` (with its `routed` options) against a
        stand-in producer and keep what it would publish; None if the options carry a
        body that is already serialized."""
        protocol_headers = dict(message.headers)
        capture = _Capture()
        app.amqp.send_task_message(capture, name, message, **routed)
        published = dict(capture.options or {})
        if "content_type" in published:
            return None
        del published["headers"]
        serializer = published.pop("serializer", None)
        content_type, encoding, _ = _dumps(capture.body, serializer=serializer)
        published.update(content_type=content_type, content_encoding=encoding)
        queue = routed.get("queue")
        if queue is not None and not isinstance(queue, str):
            queue = queue.name
        conf = app.conf
        return cls(
            protocol_headers=protocol_headers,
            options=published,
            embed=capture.body[2],
            serializer=serializer,
            expires=expires,
            retry_policy=dict(conf.task_publish_retry_policy or {}),
            queue=queue if routed.get("declare") is None else None,
        )

    def template(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        reprs: tuple[str, str],
        window_headers: Mapping[str, Any],
    ) -> MessageTemplate:
        """One entry's template: its arguments, serialized once, their reprs, and its
        message headers merged once over Celery's (`window_headers`: the entry's headers of
        any window, `WINDOW_HEADER` among them, filled in per window)."""
        # as as_task_v2 puts them in the body
        body = _dumps((args or (), kwargs or {}, self.embed), serializer=self.serializer)[2]
        if isinstance(body, str):
            body = body.encode(self.options["content_encoding"])
        # Every key in the order `fill` gives it; the per-window values are filled in later.
        merged = dict(self.protocol_headers)
        merged["id"] = merged["root_id"] = None
        merged["argsrepr"], merged["kwargsrepr"] = reprs
        if self.expires is not None:
            merged["expires"] = None
        merged.update(window_headers)
        return MessageTemplate(self, body, *reprs, merged)


@dataclass(frozen=True, slots=True)
class MessageTemplate:
    """One entry's messages (kept small: a beat may hold a million); `fill` makes one
    window's publish keywords."""

    shape: MessageShape
    body: bytes
    argsrepr: str
    kwargsrepr: str
    # Celery's headers with the entry's merged over them, as `fill` merges them for every
    # window but for the task id, the expiry and `WINDOW_HEADER` (see `fill_window`).
    merged_headers: Mapping[str, Any]

    def fill(
        self,
        task_id: str,
        *,
        headers: Mapping[str, Any],
        reply_to: str,
        now: Callable[[], datetime],
        timezone: tzinfo,
        expiration: float | None,
        retry_policy: Mapping[str, Any],
    ) -> dict[str, Any]:
        """One window's `producer.publish` keywords (the body is `self.body`).

        `headers` are the window's message headers (`message_for`'s, with any trace
        context or Sentry check-in), merged over Celery's as `send_task_message` merges
        them; `retry_policy` is the message's own, merged with the app's default likewise.
        """
        shape = self.shape
        merged = dict(shape.protocol_headers)
        merged["id"] = merged["root_id"] = task_id
        merged["argsrepr"], merged["kwargsrepr"] = self.argsrepr, self.kwargsrepr
        if shape.expires is not None:
            merged["expires"] = _expires_header(shape.expires, now, timezone)
        merged.update(headers)
        return self._options(merged, task_id, reply_to, expiration, retry_policy)

    def fill_window(
        self,
        task_id: str,
        window: str,
        *,
        reply_to: str,
        now: Callable[[], datetime],
        timezone: tzinfo,
        expiration: float | None,
        retry_policy: Mapping[str, Any],
    ) -> dict[str, Any]:
        """`fill` with the entry's own headers of `window` (`message_fields.headers_for`),
        from the headers merged once: the same keywords, in the same order, for less."""
        merged = dict(self.merged_headers)
        merged["id"] = merged["root_id"] = task_id
        expires = self.shape.expires
        if expires is not None:
            merged["expires"] = _expires_header(expires, now, timezone)
        merged[WINDOW_HEADER] = window
        return self._options(merged, task_id, reply_to, expiration, retry_policy)

    def _options(
        self,
        merged: dict[str, Any],
        task_id: str,
        reply_to: str,
        expiration: float | None,
        retry_policy: Mapping[str, Any],
    ) -> dict[str, Any]:
        shape = self.shape
        options = dict(shape.options)
        if shape.expires is not None:
            options["expiration"] = expiration
        options["headers"] = merged
        options["correlation_id"] = task_id
        options["reply_to"] = reply_to
        options["retry"] = True
        options["retry_policy"] = dict(shape.retry_policy, **retry_policy)
        return options


def _expires_header(
    expires: float | str | datetime, now: Callable[[], datetime], timezone: tzinfo
) -> str:
    """The `expires` header as `as_task_v2` computes it for this send."""
    if isinstance(expires, str):
        return expires
    if isinstance(expires, datetime):
        return expires.isoformat()
    at: datetime = maybe_make_aware(_add_seconds(now(), expires), tz=timezone)
    return at.isoformat()


def _add_seconds(at: datetime, seconds: float) -> datetime:
    """`at` plus `seconds` of elapsed time, in `at`'s zone: what Celery 5.7's
    `celery.utils.time.add_seconds_to_datetime` computes (earlier releases have no such
    function, and add to the wall clock, an hour off across a DST change)."""
    delta = timedelta(seconds=seconds)
    if is_naive(at):
        return at + delta
    return (at.astimezone(datetime_timezone.utc) + delta).astimezone(at.tzinfo)
