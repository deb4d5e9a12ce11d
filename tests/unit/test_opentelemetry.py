"""OpenTelemetry with safebeat: the real SDK and an in-memory exporter, beat and a worker."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timezone
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import safebeat.worker
from safebeat.beat.publishing import Publisher
from safebeat.config import Config
from safebeat.contrib import opentelemetry as safebeat_otel
from safebeat.entries import compile_entry
from safebeat.identity import Replica, format_window, task_id_for
from safebeat.records import Pause
from safebeat.stores.memory import MemoryStore
from safebeat.stores.per_process import store_of
from safebeat.stores.protocols import NewClaim, TickPlan
from safebeat.testing import FakeClock, memory_scheduler
from tests.unit.test_scheduler import START, drain, make_app, run


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    """A tracer provider of the test's own, for safebeat (the global one stays
    OpenTelemetry's no-op, for the other tests)."""
    provider = TracerProvider()
    safebeat_otel.use_tracer_provider(provider)
    yield provider
    safebeat_otel.use_tracer_provider(None)
    provider.shutdown()


@pytest.fixture
def spans(provider: TracerProvider) -> InMemorySpanExporter:
    """The spans recorded during the test."""
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name.startswith(prefix)]


def test_a_tick_has_a_span_and_each_publish_a_producer_span_inside_it(
    clock: FakeClock, queue: str, spans: InMemorySpanExporter
) -> None:
    """The tick's span counts what it claimed and skipped; each publish is a producer span
    in its trace with the task id as messaging.message.id, and travels in the headers."""
    app = make_app(
        queue,
        {"a": {"task": "t.run", "schedule": 10.0}, "b": {"task": "t.run", "schedule": 10.0}},
    )
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    scheduler.tick()
    clock.advance(10)
    spans.clear()
    scheduler.tick()
    messages = drain(app, queue)
    [tick] = named(spans, "safebeat tick")
    attributes = dict(tick.attributes or {})
    assert attributes["safebeat.namespace"] == "unit"
    assert attributes["safebeat.replica"] == scheduler.replica.id
    assert (attributes["safebeat.claimed"], attributes["safebeat.republished"]) == (2, 0)
    assert attributes["safebeat.skipped"] == 0
    publishes = named(spans, f"send {queue}")
    assert len(publishes) == 2
    assert {p.kind for p in publishes} == {trace.SpanKind.PRODUCER}
    assert all(p.parent is not None and p.parent.span_id == tick.context.span_id for p in publishes)
    by_id = {p.attributes["messaging.message.id"]: p for p in publishes if p.attributes}
    assert set(by_id) == {m["id"] for m in messages}
    for message in messages:
        publish = by_id[message["id"]]
        assert publish.attributes["messaging.operation.type"] == "send"
        assert publish.attributes["messaging.destination.name"] == queue
        assert publish.attributes["safebeat.entry"] == message["safebeat_entry"]
        assert publish.attributes["safebeat.window"] == message["safebeat_window"]
        trace_id = f"{publish.context.trace_id:032x}"
        span_id = f"{publish.context.span_id:016x}"
        assert message["traceparent"].startswith(f"00-{trace_id}-{span_id}-")


def test_the_tick_span_counts_skipped_windows(
    clock: FakeClock, queue: str, spans: InMemorySpanExporter
) -> None:
    """Windows skipped by a paused entry show on the tick's span as safebeat.skipped."""
    app = make_app(queue, {"a": {"task": "t.run", "schedule": 10.0}})
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store)
    scheduler.tick()
    store.set_paused("unit", "a", Pause(True))
    run(scheduler, clock, 31, step=1)
    skipped = [s.attributes["safebeat.skipped"] for s in named(spans, "safebeat tick")]
    assert sum(skipped) == 3  # type: ignore[arg-type]
    assert named(spans, "send ") == []


def test_the_workers_span_continues_the_trace_and_carries_the_window(
    provider: TracerProvider, spans: InMemorySpanExporter
) -> None:
    """A window published by safebeat runs on a real (embedded) worker instrumented by
    opentelemetry-instrumentation-celery: its span is a child of the publish span and has
    safebeat.entry, safebeat.window and safebeat.delivery."""
    app = Celery("otel", broker="memory://", backend="cache+memory://", set_as_current=False)
    app.conf.update(
        safebeat_url=f"memory://otel-{uuid.uuid4().hex}",
        safebeat_namespace="unit",
        task_default_queue=f"q-{uuid.uuid4().hex[:8]}",
    )
    ran = threading.Event()

    @app.task(name="otel.report", shared=False)
    def report() -> None:
        ran.set()

    safebeat.worker.install(app)
    store = store_of(app)[1]
    window = store.clock().replace(microsecond=0)
    task_id = task_id_for("unit", "report", window)
    claim_plan = TickPlan(claims=[NewClaim("report", window, task_id, "otel.report")])
    result = store.tick("unit", [], lambda n, s: claim_plan, replica=Replica("h", 1, "r00000"))
    assert result is not None
    [claim] = result.claimed
    raw: dict[str, Any] = {"task": "otel.report", "schedule": 60.0}
    entry = compile_entry("report", raw, app_timezone=timezone.utc, config=Config())
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False):
            with app.producer_or_acquire() as producer:
                Publisher(app).send(producer, entry, claim)
            assert ran.wait(20)
    finally:
        instrumentor.uninstrument()
    [publish] = named(spans, "send ")
    [run_span] = named(spans, "run/otel.report")
    assert run_span.context.trace_id == publish.context.trace_id
    attributes = dict(run_span.attributes or {})
    assert attributes["safebeat.entry"] == "report"
    assert attributes["safebeat.window"] == format_window(window)
    assert attributes["safebeat.delivery"] == "run"


def test_with_only_the_api_a_publish_has_no_span_unless_a_context_would_travel() -> None:
    """The global provider is the API's no-op here: nothing to record or inject, so no
    per-publish span; a valid current span or baggage would travel, so then there is one."""
    from opentelemetry import baggage, context
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    assert not safebeat_otel.tracing()
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        assert safebeat_otel.tracing()
    finally:
        context.detach(token)
    assert not safebeat_otel.tracing()
    span = NonRecordingSpan(SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(1)))
    with trace.use_span(span):
        assert safebeat_otel.tracing()
    assert not safebeat_otel.tracing()


def test_a_tracer_provider_given_to_safebeat_traces_every_publish(
    provider: TracerProvider,
) -> None:
    assert safebeat_otel.tracing()
