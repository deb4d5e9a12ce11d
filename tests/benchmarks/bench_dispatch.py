"""Dispatch benchmark: safebeat beside stock Celery beat, publishing to a real Redis broker.

What it measures, in one run:

1. Time to dispatch N entries that come due at the same instant (`--sizes`, default
   1,000 and 10,000) for stock beat (`celery.beat.PersistentScheduler`, schedule file in
   a temporary folder), safebeat on SQLite (a temporary file) and safebeat on PostgreSQL
   (a database this script creates and drops). Each scheduler runs in this process and
   is driven the way `celery.beat.Service.start` drives it: call `tick()`, sleep for the
   delay it returns only when that delay is positive. The clock starts at the instant
   the entries come due and stops once every entry has been published and `LLEN` on the
   queue confirms that all the messages are on the broker. Reported: the median of
   `--repeats` runs in seconds and messages per second, the `tick()` calls it took, and
   the time relative to stock beat's.

   How the entries come due together. Stock beat: entries every `--interval` seconds
   (1 s) whose `last_run_at` is one interval before a whole second just ahead. safebeat:
   entries registered at one instant (the Scheduler's constructor registers them) share
   the anchor, so their first window is the next second boundary after registration;
   the scheduler is built early in a second, and the clock starts at that window (an
   instant of the store's clock). A run whose scheduler was not ready before the due
   instant is discarded and run again. Each entry sends `args=(i,)`, so the script can
   tell N different entries from N messages of fewer entries; a run where no new entry
   gets published for `--stall` seconds is reported as stalled, not timed.

2. Network round trips per tick of safebeat's PostgreSQL store as the number of due
   entries grows (`--rt-sizes`, default 1 to 10,000). A small TCP proxy in this script
   sits between the store and PostgreSQL on 127.0.0.1 and counts turns: a burst of client
   bytes that ends in a request for an answer (Query, Sync, Flush), followed by the
   server's reply. Reported separately for each locked tick that claims windows and for
   the confirmation of what was published, with the bytes sent each way.

What it needs: PostgreSQL and Redis, found the way the tests find them (tests/services.py:
$SAFEBEAT_TEST_POSTGRES_URL and $SAFEBEAT_TEST_REDIS_URL, else the local defaults, else
embedded servers). Messages go to a queue of this run's own, deleted at the end.

How to run it (from the repository root):

    make bench
    .venv/bin/python tests/benchmarks/bench_dispatch.py --sizes 1000,10000 --repeats 3

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
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import celery
import kombu
import psycopg
import redis
from celery import Celery, signals
from celery.beat import PersistentScheduler

import safebeat
from safebeat.stores import open_store
from safebeat.stores.postgres import PostgresStore
from safebeat.urls import redact

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere, not only via the editable install
    sys.path.insert(0, str(ROOT))

from tests import services  # noqa: E402 - needs ROOT on sys.path

TASK_NAME = "safebeat_bench.dispatched"
STOCK = "stock beat"
SQLITE = "safebeat + SQLite"
POSTGRES = "safebeat + PostgreSQL"
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
        if isinstance(index, int) and 0 <= index < len(self.seen) and not self.seen[index]:
            self.seen[index] = 1
            self.entries += 1
            self.last_new = time.monotonic()
            self.last_new_wall = time.time()


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
    started = time.monotonic()
    while True:
        interval = scheduler.tick()
        tick_ends.append(time.time())
        if done():
            return Drive(time.time(), tick_ends, completed=True)
        now = time.monotonic()
        if now - max(started, published.last_new) > stall or now - started > timeout:
            return Drive(time.time(), tick_ends, completed=False)
        if interval and interval > 0:
            time.sleep(interval)


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


def _run(drive_result: Drive, due: float, published: Published) -> Run:
    ticks = sum(1 for end in drive_result.tick_ends if end >= due)
    stalled_after = None if drive_result.completed else published.last_new_wall - due
    return Run(
        seconds=drive_result.ended - due if drive_result.completed else None,
        ticks=ticks,
        entries_sent=published.entries,
        messages=0,
        ready_before_due=bool(drive_result.tick_ends) and drive_result.tick_ends[0] < due,
        stalled_after=stalled_after,
    )


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
            result = drive(
                scheduler,
                all_on_broker(entries, published, queue),
                published,
                stall=opts.stall,
                timeout=opts.timeout,
            )
            run = _run(result, due, published)
            run.messages = queue.count()
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
        result = drive(
            scheduler,
            all_on_broker(entries, published, queue),
            published,
            stall=opts.stall,
            timeout=opts.timeout,
        )
        run = _run(result, due, published)
        run.messages = queue.count()
        records = store.history(namespace, limit=entries * 50)
        run.windows = len({r.window for r in records if r.task_id is not None})
    finally:
        scheduler.close()
        queue.purge()
    return run


def timed(run_once: Callable[[], Run], log: LogTally) -> Run:
    """Run once; again (up to ATTEMPTS) if the scheduler was not ready at the due instant."""
    for attempt in range(1, ATTEMPTS + 1):
        before = log.count
        run = run_once()
        run.attempts = attempt
        run.warnings = log.count - before
        if run.ready_before_due:
            break
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


@dataclass
class StoreCall:
    """One store call and the traffic it made."""

    step: str  # "tick" or "record_publish"
    traffic: Traffic
    seconds: float
    entries: int  # due entries (tick) or confirmed ids (record_publish)
    claimed: int = 0


class MeteredPostgresStore(PostgresStore):
    """A PostgresStore that records the proxy traffic of every tick and publish confirmation."""

    def __init__(self, url: str, proxy: RoundTripProxy) -> None:
        super().__init__(url)
        self.proxy = proxy
        self.calls: list[StoreCall] = []

    def tick(self, *args: Any, **kwargs: Any) -> Any:
        names = args[1] if len(args) > 1 else kwargs.get("names", ())
        before, started = self.proxy.traffic(), time.perf_counter()
        result = super().tick(*args, **kwargs)
        traffic, seconds = self.proxy.traffic() - before, time.perf_counter() - started
        claimed = len(result.claimed) if result is not None else 0
        self.calls.append(StoreCall("tick", traffic, seconds, len(names), claimed))
        return result

    def record_publish(self, *args: Any, **kwargs: Any) -> Any:
        sent = args[1] if len(args) > 1 else kwargs.get("sent", ())
        before, started = self.proxy.traffic(), time.perf_counter()
        result = super().record_publish(*args, **kwargs)
        traffic, seconds = self.proxy.traffic() - before, time.perf_counter() - started
        self.calls.append(StoreCall("record_publish", traffic, seconds, len(sent)))
        return result

    def claimed(self) -> int:
        return sum(call.claimed for call in self.calls)


@dataclass
class RoundTrips:
    """Store traffic while N due entries are claimed, published and confirmed."""

    due: int
    entries_published: int  # distinct entries published while N windows were claimed
    idle_tick: StoreCall | None  # a locked tick over the N entries before their window
    claim_ticks: list[StoreCall] = field(default_factory=list)
    confirms: list[StoreCall] = field(default_factory=list)


def measure_round_trips(
    proxy: RoundTripProxy,
    pg_url: str,
    queue: BrokerQueue,
    published: Published,
    *,
    entries: int,
    opts: Options,
) -> RoundTrips:
    namespace = f"bench-rt-{uuid.uuid4().hex[:10]}"
    app = make_app(queue, entries, opts.interval, safebeat_namespace=namespace)
    store = MeteredPostgresStore(via_proxy(pg_url, proxy.port), proxy)
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


def dispatch_table(summaries: list[dict[str, Any]], repeats: int) -> str:
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
    title = (
        f"Dispatch of N entries due at one instant (median of {repeats} runs; "
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


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def round_trip_json(r: RoundTrips) -> dict[str, Any]:
    def call(c: StoreCall) -> dict[str, Any]:
        return {
            **asdict(c.traffic),
            "seconds": c.seconds,
            "entries": c.entries,
            "claimed": c.claimed,
        }

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
    parser.add_argument("--interval", type=float, default=1.0, help="entry interval (s)")
    parser.add_argument(
        "--stall", type=float, default=15.0, help="give a run up after this long without news"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="longest run (s)")
    parser.add_argument(
        "--schedulers",
        default="stock,sqlite,postgres",
        help="which of stock,sqlite,postgres to time (default: all)",
    )
    parser.add_argument("--json", type=Path, default=ROOT / ".bench" / "bench_dispatch.json")
    parser.add_argument("--postgres-url", help="admin URL (default: as the tests find it)")
    parser.add_argument("--redis-url", help="broker URL (default: as the tests find it)")
    ns = parser.parse_args(argv)
    chosen = {"stock": STOCK, "sqlite": SQLITE, "postgres": POSTGRES}
    unknown = set(ns.schedulers.split(",")) - set(chosen)
    if unknown:
        parser.error(f"--schedulers: unknown {sorted(unknown)}; choose from stock,sqlite,postgres")
    if ns.repeats < 1 or ns.interval < 1:
        parser.error("--repeats and --interval must be at least 1")
    return Options(
        sizes=ns.sizes,
        rt_sizes=ns.rt_sizes,
        repeats=ns.repeats,
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
        },
        "options": {
            "sizes": opts.sizes,
            "rt_sizes": opts.rt_sizes,
            "repeats": opts.repeats,
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
            "safebeat": safebeat.__version__,
            "postgresql": postgres_version(pg_url),
            "redis": queue.server_version(),
            "broker": f"{redact(queue.url)} queue {queue.name}",
        },
    }
    env = report["environment"]
    print(
        f"safebeat {env['safebeat']}, Celery {env['celery']}, kombu {env['kombu']}, "
        f"Python {env['python']}, {env['cpus']} CPUs; PostgreSQL {env['postgresql']}, "
        f"Redis {env['redis']} ({env['broker']})\n"
        f"entries every {opts.interval:g} s; per-message logging off (WARNING) for all\n",
        flush=True,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="safebeat-bench-") as folder:
            factories: dict[str, Callable[[], Any]] = {
                SQLITE: lambda: open_store(f"sqlite:///{folder}/{uuid.uuid4().hex}.sqlite3"),
                POSTGRES: lambda: open_store(pg_url),
            }
            runs: dict[tuple[int, str], list[Run]] = {}
            for size in opts.sizes:
                for repeat in range(1, opts.repeats + 1):
                    for kind in opts.kinds:
                        factory = factories.get(kind)
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
                        progress(
                            f"  {size:,} entries, {kind}, run {repeat}/{opts.repeats}: "
                            f"{outcome}, {run.ticks:,} ticks, {run.messages:,} messages"
                            + ("" if run.ready_before_due else " (not ready before due!)")
                        )
        summaries = [summarize(size, kind, r) for (size, kind), r in runs.items()]
        print(dispatch_table(summaries, opts.repeats) + "\n", flush=True)
        report["dispatch"] = summaries

        parts = urlsplit(pg_url)
        proxy = RoundTripProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
        try:
            results = []
            for size in opts.rt_sizes:
                results.append(
                    measure_round_trips(proxy, pg_url, queue, published, entries=size, opts=opts)
                )
                progress(f"  round trips measured with {size:,} due entries")
        finally:
            proxy.close()
        print(round_trip_table(results), flush=True)
        report["round_trips"] = [round_trip_json(r) for r in results]
    finally:
        queue.delete()
        services.drop_database(admin_url, database)
    opts.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"\nfigures: {opts.json}; log records ({log.count}): {opts.json.with_suffix('.log')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
