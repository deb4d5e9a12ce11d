"""The direct publishing path sends the very message Celery's `apply_async` would.

Each case publishes one window twice to kombu's memory broker, once through
`Publisher(direct=False)` (the task's `apply_async` or `send_task`) and once through the
direct path, and compares everything the worker sees: headers, properties, body, and
where it was routed. With a retry policy (as the dispatcher publishes) the direct path
builds an entry's message once and fills in each window: the same comparison runs over
several windows of one entry.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import celery
import pytest
from celery import Celery, Task, signals
from celery.app import amqp as celery_amqp
from celery.beat import BeatLazyFunc
from celery.utils.saferepr import saferepr
from kombu import Exchange, Queue

from safebeat.beat.message_fields import plain_repr
from safebeat.beat.publishing import Publisher
from safebeat.config import Config
from safebeat.entries import Entry, compile_entry
from safebeat.identity import task_id_for
from safebeat.stores.protocols import Claim

WINDOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def make_app() -> Celery:
    app = Celery("pub", broker="memory://", set_as_current=False)
    tag = uuid.uuid4().hex[:8]
    app.conf.update(
        task_default_queue=f"default-{tag}",
        task_queues=[
            Queue(f"default-{tag}"),
            Queue(f"reports-{tag}", Exchange(f"reports-{tag}", type="topic"), routing_key="r.#"),
        ],
        task_routes={"proj.routed": {"queue": f"reports-{tag}", "routing_key": "r.weekly"}},
        result_expires=None,
    )

    @app.task(name="proj.plain", shared=False)
    def plain(x: int = 0) -> None: ...

    @app.task(name="proj.routed", shared=False)
    def routed() -> None: ...

    @app.task(
        name="proj.tuned",
        shared=False,
        serializer="pickle",
        time_limit=60,
        soft_time_limit=30,
        ignore_result=True,
    )
    def tuned() -> None: ...

    @app.task(name="proj.expiring", shared=False, expires=30)
    def expiring() -> None: ...

    @app.task(
        name="proj.expiring_at",
        shared=False,
        expires=datetime(2100, 1, 1, tzinfo=timezone.utc),
        priority=5,
        delivery_mode=1,
        compression="zlib",
    )
    def expiring_at() -> None: ...

    return app


def plain_entry(name: str = "e", **raw: Any) -> Entry:
    """An entry of proj.plain every minute; `raw` adds to its definition."""
    return compile_entry(
        name,
        {"task": "proj.plain", "schedule": 60, **raw},
        app_timezone=timezone.utc,
        config=Config(namespace="pub"),
    )


def queues_of(app: Celery) -> list[str]:
    return [queue.name for queue in app.conf.task_queues]


RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0, "interval_max": 0}


def claim_for(name: str, window: datetime = WINDOW) -> Claim:
    return Claim(
        id=1, entry=name, window=window, task_id=task_id_for("pub", name, window), attempts=1
    )


def receive_all(app: Celery) -> list[dict[str, Any]]:
    got = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        for queue in queues_of(app):
            while (message := channel.basic_get(queue, no_ack=True)) is not None:
                got.append(
                    {
                        "queue": queue,
                        "headers": message.headers,
                        "properties": {
                            k: v
                            for k, v in message.properties.items()
                            if k not in {"delivery_tag", "delivery_info"}
                        },
                        "body": message.body,
                        "content_type": message.content_type,
                    }
                )
    return got


def publish_both_ways(app: Celery, raw: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    entry = compile_entry("e", raw, app_timezone=timezone.utc, config=Config(namespace="pub"))
    results = []
    for direct in (False, True):
        with app.producer_or_acquire() as producer:
            Publisher(app, direct=direct).send(producer, entry, claim_for("e"))
        results.append(receive_all(app))
    return results[0], results[1]


CASES: dict[str, dict[str, Any]] = {
    "registered task": {"task": "proj.plain", "schedule": 60, "args": [5]},
    "unregistered task": {"task": "elsewhere.run", "schedule": 60, "kwargs": {"a": [1, 2]}},
    "task_routes": {"task": "proj.routed", "schedule": 60},
    "queue option": {"task": "proj.plain", "schedule": 60, "options": {"queue": "reports-X"}},
    "task's own options": {"task": "proj.tuned", "schedule": 60},
    "entry options": {
        "task": "proj.plain",
        "schedule": 60,
        "options": {"priority": 7, "serializer": "pickle", "headers": {"tenant": "acme"}},
    },
    "lazy arguments": {
        "task": "proj.plain",
        "schedule": 60,
        "args": [BeatLazyFunc(lambda: 41)],
    },
    "expires (full path)": {"task": "proj.plain", "schedule": 60, "options": {"expires": 30}},
    "task's own expires": {"task": "proj.expiring", "schedule": 60},
    "task's own expiry instant, priority, delivery mode, compression": {
        "task": "proj.expiring_at",
        "schedule": 60,
    },
}


def expiry_of(message: dict[str, Any]) -> tuple[float | None, float | None]:
    """Remove and return a message's expiry: the `expires` header as a timestamp and the
    `expiration` property (milliseconds to live) in seconds, both counted from each send."""
    expires = message["headers"].pop("expires", None)
    expiration = message["properties"].pop("expiration", None)
    return (
        None if expires is None else datetime.fromisoformat(expires).timestamp(),
        None if expiration is None else float(expiration) / 1000,
    )


@pytest.mark.parametrize("case", CASES)
def test_the_direct_path_sends_the_message_apply_async_would(case: str) -> None:
    """The direct path sends what apply_async would: headers, properties, body, queue, expiry."""
    app = make_app()
    raw = CASES[case]
    if case == "queue option":
        raw = {**raw, "options": {"queue": queues_of(app)[1]}}
    full, direct = publish_both_ways(app, raw)
    assert len(full) == 1
    assert full[0]["headers"]["origin"]
    full_expiry, direct_expiry = expiry_of(full[0]), expiry_of(direct[0])
    assert (full_expiry[0] is None) == (direct_expiry[0] is None)
    assert (full_expiry[1] is None) == (direct_expiry[1] is None)
    if "expires" in case:
        assert full_expiry[0] is not None
        assert full_expiry[1] is not None
    for sent_first, sent_second in zip(full_expiry, direct_expiry, strict=True):
        if sent_first is not None and sent_second is not None:
            assert abs(sent_second - sent_first) < 5  # the same expiry, a moment later
    assert direct == full


@pytest.mark.parametrize("retry_policy", [None, RETRY], ids=["once", "templated"])
def test_a_bad_signature_fails_as_apply_async_fails(retry_policy: dict[str, int] | None) -> None:
    """typing=True tasks check the arguments before sending, on either path, also for an
    entry whose task and options another entry's message was already built for."""
    app = make_app()
    good = plain_entry("good")
    entry = plain_entry(args=[1, 2, 3])
    for direct in (False, True):
        publisher = Publisher(app, direct=direct)
        with app.producer_or_acquire() as producer:
            publisher.send(producer, good, claim_for("good"), retry_policy=retry_policy)
            with pytest.raises(TypeError):
                publisher.send(producer, entry, claim_for("e"), retry_policy=retry_policy)
    assert len(receive_all(app)) == 2


def test_a_task_with_its_own_apply_async_is_sent_through_it() -> None:
    app = make_app()
    calls = []

    class Audited(Task):  # type: ignore[misc]
        def apply_async(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs["task_id"])
            return super().apply_async(*args, **kwargs)

    @app.task(name="proj.audited", base=Audited, shared=False)
    def audited() -> None: ...

    entry = compile_entry(
        "e",
        {"task": "proj.audited", "schedule": 60},
        app_timezone=timezone.utc,
        config=Config(namespace="pub"),
    )
    with app.producer_or_acquire() as producer:
        Publisher(app).send(producer, entry, claim_for("e"))
    assert calls == [claim_for("e").task_id]
    assert len(receive_all(app)) == 1


def test_publish_signals_fire_on_the_direct_path() -> None:
    app = make_app()
    seen: list[str] = []

    def before(sender: str, headers: dict[str, Any], **_: Any) -> None:
        seen.append(headers["safebeat_window"])

    signals.before_task_publish.connect(before)
    try:
        entry = compile_entry(
            "e",
            {"task": "proj.plain", "schedule": 60},
            app_timezone=timezone.utc,
            config=Config(namespace="pub"),
        )
        with app.producer_or_acquire() as producer:
            Publisher(app).send(producer, entry, claim_for("e"))
    finally:
        signals.before_task_publish.disconnect(before)
    assert seen == ["2026-03-01T12:00:00Z"]


def test_each_queue_is_declared_once_per_connection() -> None:
    app = make_app()
    declares: list[Any] = []
    entry = compile_entry(
        "e",
        {"task": "proj.plain", "schedule": 60},
        app_timezone=timezone.utc,
        config=Config(namespace="pub"),
    )
    publisher = Publisher(app)
    with app.connection_for_write() as conn:
        conn.connect()  # as beat's connection is, before its first tick
        producer = app.amqp.Producer(conn, auto_declare=False)
        real_publish = producer.publish

        def spy(body: Any, **kwargs: Any) -> Any:
            declares.append(kwargs.get("declare"))
            return real_publish(body, **kwargs)

        producer.publish = spy
        for _ in range(3):
            publisher.send(producer, entry, claim_for("e"))
        publisher.forget_declarations()
        publisher.send(producer, entry, claim_for("e"))
    assert [bool(d) for d in declares] == [True, False, False, True]


#: Cases whose messages change per window beyond what a template fills in.
NOT_TEMPLATED = {"lazy arguments", "expires (full path)"}
WINDOWS = [WINDOW, WINDOW + timedelta(minutes=1), WINDOW + timedelta(minutes=2), WINDOW]


def without_expiry(messages: list[dict[str, Any]]) -> list[tuple[float | None, float | None]]:
    return [expiry_of(message) for message in messages]


@pytest.mark.parametrize("case", CASES)
def test_each_window_of_a_templated_entry_is_the_message_apply_async_would_send(
    case: str,
) -> None:
    """Window after window (and a window sent again), one Publisher each way: a fresh
    task id and window header each time, nothing carried over from the window before."""
    app = make_app()
    raw = CASES[case]
    if case == "queue option":
        raw = {**raw, "options": {"queue": queues_of(app)[1]}}
    entry = compile_entry("e", raw, app_timezone=timezone.utc, config=Config(namespace="pub"))
    sent = []
    for direct in (False, True):
        publisher = Publisher(app, direct=direct)
        with app.producer_or_acquire() as producer:
            for window in WINDOWS:
                publisher.send(producer, entry, claim_for("e", window), retry_policy=RETRY)
        sent.append(receive_all(app))
        if direct:
            templated = publisher._plans["e"].template is not None
            assert templated == (case not in NOT_TEMPLATED)
    full, direct_sent = sent
    assert [m["headers"]["id"] for m in direct_sent] == [
        claim_for("e", window).task_id for window in WINDOWS
    ]
    assert [m["headers"]["safebeat_window"] for m in direct_sent] == [
        "2026-03-01T12:00:00Z",
        "2026-03-01T12:01:00Z",
        "2026-03-01T12:02:00Z",
        "2026-03-01T12:00:00Z",
    ]
    for first, second in zip(without_expiry(full), without_expiry(direct_sent), strict=True):
        assert (first[0] is None) == (second[0] is None)
        assert (first[1] is None) == (second[1] is None)
        for a, b in zip(first, second, strict=True):
            if a is not None and b is not None:
                assert abs(b - a) < 5
    assert direct_sent == full
    # byte for byte: the headers in the order Celery gives them too
    assert [list(m["headers"]) for m in direct_sent] == [list(m["headers"]) for m in full]


def test_a_changed_entry_definition_builds_its_message_again() -> None:
    app = make_app()
    publisher = Publisher(app)
    with app.producer_or_acquire() as producer:
        for args in ([1], [2]):
            entry = plain_entry(args=args)
            publisher.send(producer, entry, claim_for("e"), retry_policy=RETRY)
    got = receive_all(app)
    assert [json.loads(m["body"])[0] for m in got] == [[1], [2]]
    assert [m["headers"]["argsrepr"] for m in got] == ["[1]", "[2]"]


def test_plans_beyond_the_cache_size_are_dropped_and_built_again_alike() -> None:
    """Only the most recently sent entries keep a plan; an entry whose plan was dropped
    sends the same message as before."""
    app = make_app()
    publisher = Publisher(app)
    publisher.plan_cache_size = 2
    entries = [plain_entry(name, args=[i]) for i, name in enumerate("abc")]
    sent = []
    with app.producer_or_acquire() as producer:
        for window in (WINDOW, WINDOW + timedelta(minutes=1)):
            for entry in entries:
                publisher.send(producer, entry, claim_for(entry.name, window), retry_policy=RETRY)
            sent.append(receive_all(app))
            assert list(publisher._plans) == ["b", "c"]
    first, again = sent
    for one, other in zip(first, again, strict=True):
        assert json.loads(one["body"]) == json.loads(other["body"])
        assert one["headers"]["argsrepr"] == other["headers"]["argsrepr"]
        assert one["headers"]["task"] == other["headers"]["task"]
    assert [m["headers"]["id"] for m in again] == [
        claim_for(name, WINDOW + timedelta(minutes=1)).task_id for name in "abc"
    ]


def test_publish_signals_fire_once_a_receiver_connects_after_the_template() -> None:
    """A receiver connected later gets every later window as it gets apply_async's
    messages: Celery publishes them again."""
    app = make_app()
    seen: list[str] = []

    def before(sender: str, headers: dict[str, Any], **_: Any) -> None:
        seen.append(headers["safebeat_window"])

    entry = plain_entry()
    publisher = Publisher(app)
    with app.producer_or_acquire() as producer:
        publisher.send(producer, entry, claim_for("e"), retry_policy=RETRY)
        assert publisher._plans["e"].template is not None
        signals.before_task_publish.connect(before)
        try:
            later = claim_for("e", WINDOW + timedelta(minutes=1))
            publisher.send(producer, entry, later, retry_policy=RETRY)
            # The same entry through the task's own apply_async, to compare with.
            full = claim_for("e", WINDOW + timedelta(minutes=2))
            Publisher(app, direct=False).send(producer, entry, full, retry_policy=RETRY)
        finally:
            signals.before_task_publish.disconnect(before)
    if celery.VERSION >= (5, 7):
        assert seen == ["2026-03-01T12:01:00Z", "2026-03-01T12:02:00Z"]
    else:
        # Before 5.7, Celery's sender asks the receivers list it saw when app.amqp made it,
        # which a connect after a receiver died replaces: then apply_async misses the
        # receiver as well. The template must not be what makes the difference.
        assert ("2026-03-01T12:01:00Z" in seen) == ("2026-03-01T12:02:00Z" in seen), seen
    assert len(receive_all(app)) == 3


def test_without_celerys_callback_retry_marker_the_publisher_imports_and_templates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Celery 5.4-5.6 have no `celery.app.amqp._callback_publish_retry` (5.7's marker of a
    callback's publish): the publishing module imports without it, and an entry's message
    is built once and filled in per window, the message apply_async would send. (Celery
    5.7's own sender needs the marker, so it is back for the sends; on 5.4-5.6, which the
    version matrix runs, it is not there at all.)"""
    spec = importlib.util.find_spec("safebeat.beat.publishing")
    assert spec is not None
    assert spec.loader is not None
    publishing = importlib.util.module_from_spec(spec)
    with monkeypatch.context() as patch:
        patch.delattr(celery_amqp, "_callback_publish_retry", raising=False)
        spec.loader.exec_module(publishing)  # a fresh import, as on a Celery without it
    app = make_app()
    entry = plain_entry(args=[5])
    sent = []
    for direct in (False, True):
        publisher = publishing.Publisher(app, direct=direct)
        with app.producer_or_acquire() as producer:
            for window in WINDOWS:
                publisher.send(producer, entry, claim_for("e", window), retry_policy=RETRY)
        sent.append(receive_all(app))
    assert publisher._plans["e"].template is not None
    full, templated = sent
    assert [m["headers"]["id"] for m in templated] == [
        claim_for("e", window).task_id for window in WINDOWS
    ]
    assert templated == full


def test_entries_that_share_a_task_and_options_keep_their_own_arguments_and_headers() -> None:
    """Every kind of entry through one Publisher, two windows each, interleaved: what
    one entry's message was built from never shows up in another's."""
    app = make_app()
    config = Config(namespace="pub")
    raws = {
        **CASES,
        "queue option": {**CASES["queue option"], "options": {"queue": queues_of(app)[1]}},
    }
    raws["more arguments"] = {"task": "proj.plain", "schedule": 60, "args": [6]}
    raws["other headers"] = {
        "task": "proj.plain",
        "schedule": 60,
        "options": {"headers": {"tenant": "other"}},
    }
    entries = [
        compile_entry(f"e{i}", raw, app_timezone=timezone.utc, config=config)
        for i, raw in enumerate(raws.values())
    ]
    sent = []
    for direct in (False, True):
        publisher = Publisher(app, direct=direct)
        with app.producer_or_acquire() as producer:
            for window in WINDOWS[:2]:
                for entry in entries:
                    claim = claim_for(entry.name, window)
                    publisher.send(producer, entry, claim, retry_policy=RETRY)
        sent.append(receive_all(app))
    full, direct_sent = sent
    assert len(full) == 2 * len(entries)
    for messages in (full, direct_sent):
        without_expiry(messages)
    key = lambda m: (m["headers"]["safebeat_window"], m["headers"]["safebeat_entry"])  # noqa: E731
    assert sorted(direct_sent, key=key) == sorted(full, key=key)


NAN = float("nan")


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ([], True),
        ((), True),
        ({}, True),
        ([1, -2, 2.5, 1e300, NAN, float("inf"), 10**30, True, None], True),
        (["x", '"double"', "", "a b"], True),
        ({"a": 1, "b": None, "c": "text", "d": 0.1}, True),
        (["quote's"], False),
        (["é"], False),
        (["\n\t"], False),
        (["back\\slash"], False),
        (["\u200b"], False),
        ({"k'": 1}, False),
        ([[1, 2]], False),
        ([b"bytes"], False),
        (["x" * 200], False),
        ({"nested": {"a": [1, [2, [3, [4]]]]}}, False),
    ],
)
def test_the_plain_repr_of_arguments_is_celerys_saferepr(value: Any, plain: bool) -> None:
    """Where plain_repr answers, it answers what as_task_v2's saferepr would."""
    for maxsize in (1024, 20):
        text = plain_repr(value, maxsize)
        if text is not None:
            assert text == saferepr(value, maxsize, maxlevels=3)
    assert (plain_repr(value, 1024) is not None) == plain
