"""An entry's Celery message built once, filled in per window, published through kombu.

Celery builds every message from scratch: the protocol headers, the route, the queue's
exchange and delivery mode, the serialized body. For a periodic entry all of that is the
same from one window to the next except the task id (`id`, `root_id`, `correlation_id`),
the `safebeat_window` header and, for a task with its own `expires`, the expiry. A
`MessageTemplate` keeps what `send_task_message` would hand to `producer.publish` for the
entry's first window, with the body serialized once, and each window copies it and fills
in those few fields.

It is taken only where that is exact (`Publisher` decides): task protocol 2, no
`before_task_publish`/`after_task_publish`/`task_sent` receivers, no `task-sent` event,
static routes, arguments that are not lazy, and entry headers that leave Celery's own
`id`, `root_id` and `expires` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from celery import signals
from celery.utils.time import add_seconds_to_datetime, maybe_make_aware
from kombu.serialization import dumps

from safebeat.identity import WINDOW_HEADER

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
class MessageTemplate:
    """What one entry's messages share; `fill` makes one window's publish arguments."""

    body: Any
    options: Mapping[str, Any]  # producer.publish keywords, headers included
    expires: float | str | datetime | None  # the task's own expiry, computed per window
    retry: bool  # task_publish_retry, as send_task_message merges it
    retry_policy: Mapping[str, Any]  # task_publish_retry_policy, likewise

    @classmethod
    def capture(
        cls,
        app: Any,
        name: str,
        message: Any,
        options: Mapping[str, Any],
        *,
        expires: float | str | datetime | None,
    ) -> MessageTemplate:
        """Run `send_task_message` for `message` against a stand-in producer and keep what
        it would publish, the body serialized as kombu would serialize it."""
        capture = _Capture()
        app.amqp.send_task_message(capture, name, message, **options)
        published = dict(capture.options or {})
        body = capture.body
        if "content_type" not in published:
            serializer = published.pop("serializer", None)
            content_type, encoding, body = dumps(body, serializer=serializer)  # type: ignore[no-untyped-call]
            if isinstance(body, str):
                body = body.encode(encoding)
            published.update(content_type=content_type, content_encoding=encoding)
        conf = app.conf
        return cls(
            body=body,
            options=published,
            expires=expires,
            retry=bool(conf.task_publish_retry),
            retry_policy=dict(conf.task_publish_retry_policy or {}),
        )

    def fill(
        self,
        task_id: str,
        window: str,
        *,
        reply_to: str,
        now: Callable[[], datetime],
        timezone: tzinfo,
        expiration: float | None,
        retry: bool | None,
        retry_policy: Mapping[str, Any] | None,
        extra_headers: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One window's `producer.publish` keywords (the body is `self.body`).

        `retry`/`retry_policy` are the message's own options, merged with the app's
        defaults as `send_task_message` merges them; `extra_headers` are headers added
        for this window alone (trace context, Sentry's check-in).
        """
        headers = dict(self.options["headers"])
        headers["id"] = headers["root_id"] = task_id
        headers[WINDOW_HEADER] = window
        options = dict(self.options)
        if self.expires is not None:
            headers["expires"] = self._expires_header(now, timezone)
            options["expiration"] = expiration
        if extra_headers:
            headers.update(extra_headers)
        options["headers"] = headers
        options["correlation_id"] = task_id
        options["reply_to"] = reply_to
        options["retry"] = self.retry if retry is None else retry
        options["retry_policy"] = (
            dict(self.retry_policy, **retry_policy) if retry_policy else dict(self.retry_policy)
        )
        return options

    def _expires_header(self, now: Callable[[], datetime], timezone: tzinfo) -> str:
        """The `expires` header as `as_task_v2` computes it for this send."""
        expires = self.expires
        if isinstance(expires, str):
            return expires
        if isinstance(expires, datetime):
            return expires.isoformat()
        at: datetime = maybe_make_aware(add_seconds_to_datetime(now(), expires), tz=timezone)
        return at.isoformat()
