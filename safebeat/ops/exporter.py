"""`safebeat exporter`: one process per namespace serving what the store knows of each
entry, for alerts that survive every restart of beat.

It reads the store (`ops.schedule_health`) once before serving and then every `interval`
in a thread; a scrape renders the latest reading, so scrapes cost the same at any size
and never touch the store. A failed reading sets `safebeat_exporter_store_up` to 0, counts
a read error and withdraws what the last reading said (a stale "0 overdue" would look like
health; a stale next due window would page for windows beat decided since): only when
the last good reading was (`safebeat_schedule_read_timestamp_seconds`) stays.
docs/metrics.md lists the series; a test keeps that table and EXPORTER_SERIES in step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from safebeat.errors import StoreError
from safebeat.listening import any_address, serve_registry, shown
from safebeat.ops.schedule_health import EntryHealth, NamespaceHealth
from safebeat.prometheus_table import NAMESPACE, without_created_series

logger = logging.getLogger("safebeat.exporter")

ENTRY = (NAMESPACE, "entry")


@dataclass(frozen=True)
class Series:
    """One metric the exporter serves: a gauge, or a counter (`counter`)."""

    name: str
    help: str
    labels: tuple[str, ...]
    counter: bool = False


#: Per namespace, always served, whatever the store answers: whether the latest reading
#: succeeded, when the last good one was, and the failed ones.
STATUS_SERIES = (
    Series(
        "safebeat_exporter_store_up",
        "1 if the exporter's latest reading of the store succeeded, 0 if it failed or none "
        "has yet: then no reading's values are served.",
        (NAMESPACE,),
    ),
    Series(
        "safebeat_schedule_read_timestamp_seconds",
        "When the exporter last read the store successfully (store clock, Unix time).",
        (NAMESPACE,),
    ),
    Series(
        "safebeat_schedule_read_duration_seconds",
        "Seconds the exporter's latest successful reading of the store took.",
        (NAMESPACE,),
    ),
    Series(
        "safebeat_schedule_read_errors",
        "Readings of the store that failed.",
        (NAMESPACE,),
        counter=True,
    ),
)

#: Per namespace, from the latest reading while it succeeded: the alerts' aggregates.
NAMESPACE_SERIES = (
    Series("safebeat_schedule_entries", "Entries registered in the store.", (NAMESPACE,)),
    Series(
        "safebeat_schedule_overdue_entries",
        "Entries whose next due window is more than the exporter's grace in the past: no "
        "replica decided it (sent or skipped) in time.",
        (NAMESPACE,),
    ),
    Series(
        "safebeat_schedule_failing_entries",
        "Entries whose latest finished run failed (among the newest dispatch rows read).",
        (NAMESPACE,),
    ),
    Series("safebeat_schedule_paused_entries", "Entries paused now.", (NAMESPACE,)),
    Series(
        "safebeat_schedule_broken_entries",
        "Entries beat puts aside: a definition that does not load, a state not readable.",
        (NAMESPACE,),
    ),
    Series(
        "safebeat_schedule_unsent_claims",
        "Claims older than safebeat_claim_timeout never confirmed sent (among the newest "
        "dispatch rows read).",
        (NAMESPACE,),
    ),
    Series(
        "safebeat_schedule_oldest_live_run_timestamp_seconds",
        "Start of the oldest run whose lease is alive (Unix time); absent when none runs.",
        (NAMESPACE,),
    ),
    Series(
        "safebeat_schedule_entries_omitted",
        "Entries with no per-entry series: over --max-entries, or --max-entries 0.",
        (NAMESPACE,),
    ),
)

#: Per entry, for the entries detailed (--max-entries): instants as Unix time.
ENTRY_SERIES = (
    Series(
        "safebeat_entry_next_due_timestamp_seconds",
        "The oldest window not decided yet; absent when paused with no end or finished.",
        ENTRY,
    ),
    Series(
        "safebeat_entry_last_window_timestamp_seconds",
        "The newest window decided (sent or skipped) by any replica.",
        ENTRY,
    ),
    Series(
        "safebeat_entry_last_sent_window_timestamp_seconds",
        "The newest window published.",
        ENTRY,
    ),
    Series("safebeat_entry_paused", "1 while the entry is paused, else 0.", ENTRY),
    Series(
        "safebeat_entry_paused_until_timestamp_seconds",
        "Where a pause in force ends by itself; absent when it has no end.",
        ENTRY,
    ),
    Series(
        "safebeat_entry_last_success_timestamp_seconds",
        "When the entry's latest successful run finished.",
        ENTRY,
    ),
    Series(
        "safebeat_entry_last_failure_timestamp_seconds",
        "When the entry's latest failed run finished.",
        ENTRY,
    ),
)

EXPORTER_SERIES = (*STATUS_SERIES, *NAMESPACE_SERIES, *ENTRY_SERIES)


def unix(instant: datetime | None) -> float | None:
    return None if instant is None else instant.astimezone(timezone.utc).timestamp()


def entry_values(entry: EntryHealth) -> dict[str, float | None]:
    """The values of `entry`'s series by name; None: the series is absent."""
    return {
        "safebeat_entry_next_due_timestamp_seconds": unix(entry.next_due),
        "safebeat_entry_last_window_timestamp_seconds": unix(entry.last_window),
        "safebeat_entry_last_sent_window_timestamp_seconds": unix(entry.last_sent_window),
        "safebeat_entry_paused": float(entry.paused),
        "safebeat_entry_paused_until_timestamp_seconds": unix(entry.paused_until),
        "safebeat_entry_last_success_timestamp_seconds": unix(entry.last_success),
        "safebeat_entry_last_failure_timestamp_seconds": unix(entry.last_failure),
    }


def namespace_values(health: NamespaceHealth) -> dict[str, float | None]:
    """The values of the namespace's gauges by name, from one reading."""
    return {
        "safebeat_schedule_entries": health.entries,
        "safebeat_schedule_overdue_entries": health.overdue,
        "safebeat_schedule_failing_entries": health.failing,
        "safebeat_schedule_paused_entries": health.paused,
        "safebeat_schedule_broken_entries": health.broken,
        "safebeat_schedule_unsent_claims": health.unsent_claims,
        "safebeat_schedule_oldest_live_run_timestamp_seconds": unix(health.oldest_live_run),
        "safebeat_schedule_entries_omitted": health.omitted,
    }


@dataclass(frozen=True)
class Reading:
    """The latest successful reading and what it cost."""

    health: NamespaceHealth
    seconds: float


class ScheduleHealthCollector(Collector):
    """Renders the latest reading while it succeeded; `refresh` replaces it (one
    assignment: a scrape sees one whole state, the previous or the new)."""

    def __init__(
        self, namespace: str, read: Callable[[], NamespaceHealth], clock: Callable[[], float]
    ) -> None:
        self.namespace = namespace
        self._read = read
        self._clock = clock
        #: The last successful reading, and whether the latest attempt was it (one tuple,
        #: assigned at once, for the scrapes' thread).
        self._latest: tuple[Reading | None, bool] = (None, False)
        self.read_errors = 0

    @property
    def reading(self) -> Reading | None:
        """The last successful reading, None before the first."""
        return self._latest[0]

    @property
    def store_up(self) -> bool:
        """Whether the latest reading succeeded."""
        return self._latest[1]

    def refresh(self) -> bool:
        """Read the store once; return whether it answered."""
        started = self._clock()
        try:
            health = self._read()
        except StoreError as exc:
            self._failed()
            logger.warning(
                "safebeat exporter: cannot read the store (safebeat_exporter_store_up 0, "
                "no schedule values served until it can): %s",
                exc,
            )
            return False
        except Exception:
            # Anything else is logged and counted too: the thread must keep reading.
            self._failed()
            logger.exception("safebeat exporter: reading the store failed")
            return False
        self._latest = (Reading(health, self._clock() - started), True)
        return True

    def _failed(self) -> None:
        self.read_errors += 1
        self._latest = (self._latest[0], False)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        reading, up = self._latest
        status: dict[str, float | None] = {"safebeat_exporter_store_up": float(up)}
        if reading is not None:
            status["safebeat_schedule_read_timestamp_seconds"] = unix(reading.health.now)
            status["safebeat_schedule_read_duration_seconds"] = reading.seconds
        current = reading if up else None
        values = {} if current is None else namespace_values(current.health)
        for series in (*STATUS_SERIES, *NAMESPACE_SERIES):
            if series.counter:
                counter = CounterMetricFamily(series.name, series.help, labels=series.labels)
                counter.add_metric([self.namespace], self.read_errors)
                yield counter
                continue
            gauge = GaugeMetricFamily(series.name, series.help, labels=series.labels)
            value = status.get(series.name, values.get(series.name))
            if value is not None:
                gauge.add_metric([self.namespace], value)
            yield gauge
        detailed = () if current is None else current.health.detailed
        rows = [(entry.name, entry_values(entry)) for entry in detailed]
        for series in ENTRY_SERIES:
            gauge = GaugeMetricFamily(series.name, series.help, labels=series.labels)
            for name, by_series in rows:
                value = by_series[series.name]
                if value is not None:
                    gauge.add_metric([self.namespace, name], value)
            yield gauge


def serve(
    collector: ScheduleHealthCollector,
    *,
    port: int,
    address: str | None,
    interval: float,
    stop: threading.Event,
) -> None:
    """Read once, serve on http://address:port/metrics (None: every address, IPv6 and
    IPv4), then read every `interval` seconds until `stop` is set. Raise OSError if the
    port cannot be opened."""
    collector.refresh()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    without_created_series()
    address = any_address() if address is None else address
    serve_registry(registry, port, address)
    logger.info(
        "safebeat exporter: namespace %r on http://%s/metrics",
        collector.namespace,
        shown(address, port),
    )
    while not stop.wait(interval):
        collector.refresh()
