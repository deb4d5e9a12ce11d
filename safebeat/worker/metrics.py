"""Prometheus metrics of the worker hook, served on `safebeat_worker_metrics_port`.

A worker with the solo or threads pool is one process: its metrics are served directly.
Prefork children are separate processes: set `PROMETHEUS_MULTIPROC_DIR` (an empty
folder, the prometheus_client convention) in the worker's environment before it starts,
and the worker's main process serves what every child recorded. docs/metrics.md lists
the metrics; a test scrapes a real prefork worker.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    multiprocess,
)

from safebeat.listening import any_address, serve_registry, shown
from safebeat.prometheus_table import NAMESPACE, Metric, Metrics, without_created_series

# Typed in some prometheus-client releases and untyped in others: used as Any, so the
# type check passes the same way on every release the package supports.
_multiprocess: Any = multiprocess

logger = logging.getLogger("safebeat.worker")

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
RUNTIME_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


WORKER_METRICS = (
    Metric(
        "safebeat_executions",
        "Executions of safebeat windows that finished, by outcome (success, failure, retry).",
        (NAMESPACE, "entry", "outcome"),
        Counter,
    ),
    Metric(
        "safebeat_duplicates_suppressed",
        "Deliveries of a window whose run already finished, skipped without running the task.",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_deliveries_deferred",
        "Deliveries of a window whose run was alive (or, for overlap=forbid, of an entry "
        "with a live run), sent again for later instead of running.",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_runs_taken_over",
        "Deliveries that took over a window whose run had died (its lease expired "
        "without a finish) and ran it again.",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_executions_untracked",
        "Deliveries run without the duplicate check: the store was unreachable, or the "
        "window had no dispatch row.",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_task_runtime_seconds",
        "Seconds a safebeat window's task ran, as the worker measured it.",
        (NAMESPACE,),
        Histogram,
        {"buckets": RUNTIME_BUCKETS},
    ),
    Metric(
        "safebeat_paused_after_failures",
        "Entries this worker paused because their latest runs all failed "
        "(pause_after_failures); an alert: the entry sends nothing until resumed.",
        (NAMESPACE, "entry"),
        Counter,
    ),
    Metric(
        "safebeat_last_success_timestamp_seconds",
        "When each entry last finished successfully on this worker (Unix time).",
        (NAMESPACE, "entry"),
        Gauge,
        {"multiprocess_mode": "max"},
    ),
)


@dataclass
class WorkerTotals:
    """What the hook did in this process since it started, counted always."""

    started: int = 0  # executions whose start was recorded (takeovers included)
    taken_over: int = 0
    duplicates: int = 0
    untracked: int = 0
    store_errors: int = 0
    deferred: int = 0
    renewal_errors: int = 0
    paused_after_failures: int = 0  # entries this process paused (pause_after_failures)


class WorkerMetrics:
    """The one place the hook counts what it does in this process.

    `totals` always counts. The Prometheus series are recorded once `serve` was called in
    this process or the one it forked from, or in multiprocess mode, where every child
    writes its own files and the serving process adds them up.
    """

    def __init__(self) -> None:
        self.totals = WorkerTotals()
        self.recording = bool(os.environ.get(MULTIPROCESS_DIR))
        self.registry = CollectorRegistry(auto_describe=True)
        # In multiprocess mode values live in files; the metrics need no registry.
        registry = None if os.environ.get(MULTIPROCESS_DIR) else self.registry
        self._metrics = Metrics(WORKER_METRICS, registry)

    def started(self, namespace: str, entry: str, *, takeover: bool) -> None:
        self.totals.started += 1
        self.totals.taken_over += takeover
        if takeover:
            self._inc("safebeat_runs_taken_over", namespace, entry)

    def finished(self, namespace: str, entry: str, outcome: str, seconds: float) -> None:
        if not self.recording:
            return
        self._metrics.inc("safebeat_executions", namespace, entry, outcome)
        self._metrics.observe("safebeat_task_runtime_seconds", seconds, namespace)
        if outcome == "success":
            self._metrics.set(
                "safebeat_last_success_timestamp_seconds", time.time(), namespace, entry
            )

    def paused_after_failures(self, namespace: str, entry: str) -> None:
        self.totals.paused_after_failures += 1
        self._inc("safebeat_paused_after_failures", namespace, entry)

    def duplicate(self, namespace: str, entry: str) -> None:
        self.totals.duplicates += 1
        self._inc("safebeat_duplicates_suppressed", namespace, entry)

    def deferred(self, namespace: str, entry: str) -> None:
        self.totals.deferred += 1
        self._inc("safebeat_deliveries_deferred", namespace, entry)

    def renewal_error(self) -> None:
        self.totals.renewal_errors += 1

    def untracked(self, namespace: str | None, entry: str) -> None:
        """A delivery ran without the duplicate check (`namespace` None: settings unreadable)."""
        self.totals.untracked += 1
        if namespace is not None:
            self._inc("safebeat_executions_untracked", namespace, entry)

    def _inc(self, name: str, namespace: str, entry: str) -> None:
        if self.recording:
            self._metrics.inc(name, namespace, entry)

    def store_error(self) -> None:
        self.totals.store_errors += 1

    def serve(self, port: int, *, pool: str | None) -> None:
        """Serve the metrics from this (the worker's main) process."""
        registry = self.registry
        folder = os.environ.get(MULTIPROCESS_DIR)
        if folder:
            registry = CollectorRegistry()
            _multiprocess.MultiProcessCollector(registry, path=folder)
        elif pool == "prefork":
            logger.warning(
                "safebeat: the prefork pool runs tasks in child processes, whose metrics "
                "this port cannot see unless %s is set before the worker starts "
                "(docs/metrics.md)",
                MULTIPROCESS_DIR,
            )
        without_created_series()
        address = any_address()
        serve_registry(registry, port, address)
        self.recording = True
        logger.info("safebeat: worker metrics on http://%s/metrics", shown(address, port))


def child_exited(pid: int) -> None:
    """Tell multiprocess mode that a pool child is gone (its live gauges stop counting)."""
    if os.environ.get(MULTIPROCESS_DIR):
        _multiprocess.mark_process_dead(pid)


metrics = WorkerMetrics()


def pool_name(worker: Any) -> str | None:
    """The pool of a Celery WorkController: prefork, threads, solo, ..."""
    pool_cls = getattr(worker, "pool_cls", None)
    name = getattr(pool_cls, "__module__", "") or str(pool_cls or "")
    for module, pool in (
        ("prefork", "prefork"),
        ("thread", "threads"),
        ("solo", "solo"),
        ("eventlet", "eventlet"),
        ("gevent", "gevent"),
    ):
        if module in name:
            return pool
    return None
