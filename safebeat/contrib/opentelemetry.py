"""OpenTelemetry traces of beat's ticks and publishes, carried to the worker's span.

Built in and free when unused: nothing here imports OpenTelemetry unless the application
already has (`opentelemetry.trace` is loaded), and with only the API installed every
span is a no-op. With a tracer provider configured (the SDK), beat records:

- a span per tick that claims or re-publishes (`safebeat tick`), with the attributes
  `safebeat.namespace`, `safebeat.replica`, `safebeat.claimed`, `safebeat.skipped`
  (windows) and `safebeat.republished`;
- inside it, a producer span per published window, named and attributed by the
  messaging semantic conventions (`send <queue>`, `messaging.operation.type` `send`,
  `messaging.message.id` = the task id, `messaging.destination.name`), plus
  `safebeat.entry`, `safebeat.window` and `safebeat.attempts`; its context travels in
  the message headers (W3C `traceparent`), so the worker's span continues the trace;
- on the worker (with `safebeat.worker.install(app)`), the span current when the task
  starts (opentelemetry-instrumentation-celery's `run/<task>`) gets `safebeat.entry`,
  `safebeat.window` and `safebeat.delivery` (`run`, `takeover`, `duplicate`...).

It plugs in on safebeat's hooks (`safebeat.hooks`): around a publish (while `tracing()`),
around a tick, and a delivery's verdict; they are registered when `safebeat.hooks` is
loaded. See docs/opentelemetry.md.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

from safebeat import hooks
from safebeat._version import __version__
from safebeat.identity import format_window
from safebeat.records import Claim

_SCOPE = "safebeat"
#: kombu transports by the `messaging.system` value the conventions give their broker.
_SYSTEMS = {"amqp": "rabbitmq", "redis": "redis", "sqs": "aws_sqs"}


_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Trace with `provider` instead of the global tracer provider (None: the global one
    again), as OpenTelemetry's instrumentations take `tracer_provider=`."""
    global _provider  # noqa: PLW0603 - one setting per process, like the global provider
    _provider = provider


def _tracer(trace: Any) -> Any:
    return trace.get_tracer(_SCOPE, __version__, tracer_provider=_provider)


def _trace() -> Any:
    """The OpenTelemetry trace API if the application loaded it, else None."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace  # noqa: PLC0415 - only where the application uses it

    return trace


def tracing() -> bool:
    """Whether a publish here may record a span or carry trace context in its headers.

    False unless the application loaded OpenTelemetry's trace API; False too while that
    API is all there is (no tracer provider set, none given to safebeat, no valid span or
    baggage current, only the W3C propagators): every span would be a no-op and nothing
    would be injected, and a burst of windows should not pay for thousands of them.
    (Some libraries load the API on their own: redis-py 8 does.)
    """
    trace = _trace()
    if trace is None:
        return False
    return _provider is not None or not _inert(trace)


def _inert(trace: Any) -> bool:
    baggage, propagate, context, inert_propagators = _api()
    provider = trace.get_tracer_provider()
    current = context.get_current()
    textmap = propagate.get_global_textmap()
    global _last_inert  # noqa: PLW0603 - a burst asks once per window, with nothing changed
    if _last_inert is not None and _last_inert[:3] == (provider, current, textmap):
        return _last_inert[3]
    inert = (
        isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        and not trace.get_current_span(current).get_span_context().is_valid
        and not baggage.get_all(current)
        and all(
            type(propagator) in inert_propagators
            for propagator in getattr(textmap, "_propagators", (textmap,))
        )
    )
    _last_inert = (provider, current, textmap, inert)
    return inert


#: The last `_inert` answer, with the provider, context and propagator it was for.
_last_inert: tuple[Any, Any, Any, bool] | None = None


@cache
def _api() -> tuple[Any, Any, Any, tuple[type, ...]]:
    """The API modules `_inert` reads, and the propagators that inject nothing without a
    span or baggage (imported once, only where the application loaded the trace API)."""
    from opentelemetry import baggage, context, propagate  # noqa: PLC0415
    from opentelemetry.baggage.propagation import W3CBaggagePropagator  # noqa: PLC0415
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    return baggage, propagate, context, (TraceContextTextMapPropagator, W3CBaggagePropagator)


@dataclass
class TickSpan:
    """The tick's span, for the scheduler to fill in once it knows what the tick did."""

    span: Any = None

    def done(self, *, claimed: int, skipped: int, republished: int, busy: bool) -> None:
        """Record what the tick did: windows claimed, skipped, re-published; lock busy."""
        if self.span is None:
            return
        self.span.set_attributes(
            {
                "safebeat.claimed": claimed,
                "safebeat.skipped": skipped,
                "safebeat.republished": republished,
                "safebeat.lock_busy": busy,
            }
        )


@contextmanager
def tick_span(namespace: str, replica: str) -> Iterator[TickSpan]:
    """A span around one tick (claim and publish); current while it runs."""
    trace = _trace()
    if trace is None:
        yield TickSpan()
        return
    tracer = _tracer(trace)
    with tracer.start_as_current_span(
        "safebeat tick",
        kind=trace.SpanKind.INTERNAL,
        attributes={"safebeat.namespace": namespace, "safebeat.replica": replica},
    ) as span:
        yield TickSpan(span)


@contextmanager
def publish_span(
    entry: str,
    claim: Claim,
    headers: MutableMapping[str, Any],
    *,
    destination: str | None,
    transport: str | None,
) -> Iterator[None]:
    """A producer span around one window's publish; its context goes into `headers`."""
    trace = _trace()
    if trace is None:
        yield
        return
    from opentelemetry import propagate  # noqa: PLC0415

    attributes: dict[str, Any] = {
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.message.id": claim.task_id,
        "messaging.system": _SYSTEMS.get(transport or "", transport or "celery"),
        "safebeat.entry": entry,
        "safebeat.window": format_window(claim.window),
        "safebeat.attempts": claim.attempts,
    }
    if destination:
        attributes["messaging.destination.name"] = destination
    tracer = _tracer(trace)
    with tracer.start_as_current_span(
        f"send {destination or entry}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ):
        propagate.inject(headers)
        yield


def annotate_task_span(entry: str, window: str, delivery: str | None = None) -> None:
    """Add the window (and what the worker hook decided) to the task's current span."""
    trace = _trace()
    if trace is None:
        return
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attributes({"safebeat.entry": entry, "safebeat.window": window})
    if delivery is not None:
        span.set_attribute("safebeat.delivery", delivery)


def _around_publish(publish: hooks.Publish) -> AbstractContextManager[None]:
    return publish_span(
        publish.entry.name,
        publish.claim,
        publish.headers,
        destination=publish.destination,
        transport=publish.transport,
    )


@contextmanager
def _around_tick(tick: hooks.Tick) -> Iterator[None]:
    with tick_span(tick.namespace, tick.replica) as span:
        yield
        span.done(
            claimed=tick.claimed,
            skipped=tick.skipped,
            republished=tick.republished,
            busy=tick.busy,
        )


def _on_delivery(delivery: hooks.Delivery) -> None:
    verdict = None if delivery.verdict == "untracked" else delivery.verdict
    annotate_task_span(delivery.entry, format_window(delivery.window), verdict)


hooks.around_publish(_around_publish, active=tracing)
hooks.around_tick(_around_tick)
hooks.on_delivery(_on_delivery)
