"""The SQLite store's connection: one per thread, its write transactions, its error boundary.

Also the conversions between SQLite's integers (microseconds since the epoch) and
safebeat's instants and records, which every part of the store uses.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from safebeat.errors import ConfigError, StoreError, StoreUnavailable
from safebeat.records import (
    DispatchRecord,
    EntryState,
    Outcome,
    Status,
    system_clock,
)
from safebeat.store_urls import redact
from safebeat.stores.decoding import record_of, state_of, state_of_columns
from safebeat.stores.sql_common import DispatchRow
from safebeat.stores.sqlfiles import load_queries

Q = load_queries(__package__ or "safebeat.stores.sqlite")

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# A burst writes and reads back the same few instants (its windows, the entries' anchors)
# thousands of times: each is converted once.
@lru_cache(maxsize=4096)
def _us(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


@lru_cache(maxsize=4096)
def _instant(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _maybe_instant(micros: int | None) -> datetime | None:
    return None if micros is None else _instant(micros)


def _state(row: Sequence[Any]) -> EntryState:
    """The state of a row, or an unreadable one if a value is not what safebeat writes."""
    return state_of(row[0], lambda: state_of_columns(row, _instant))


def _record(r: Sequence[Any]) -> DispatchRecord:
    """The history record of a row, or an unreadable one if a value cannot be read."""
    return record_of(r[0], str(r[1]), lambda: _decoded_record(r))


def _decoded_record(r: Sequence[Any]) -> DispatchRecord:
    return DispatchRecord(
        id=r[0],
        entry=r[1],
        window=_instant(r[2]),
        status=Status(r[3]),
        task_id=r[4],
        task_name=r[5],
        reason=r[6],
        skipped_from=_maybe_instant(r[7]),
        skipped_count=r[8],
        replica=r[9],
        host=r[10],
        pid=r[11],
        claimed_at=_instant(r[12]),
        sent_at=_maybe_instant(r[13]),
        attempts=r[14],
        error=r[15],
        started_at=_maybe_instant(r[16]),
        finished_at=_maybe_instant(r[17]),
        outcome=None if r[18] is None else Outcome(r[18]),
        runtime=None if r[19] is None else timedelta(microseconds=r[19]),
        worker=r[20],
        retries=r[21],
        runs=r[22],
        duplicates=r[23],
        lease_until=_maybe_instant(r[24]),
    )


def insert_dispatch(
    conn: sqlite3.Connection,
    namespace: str,
    row: DispatchRow,
    now: datetime,
    who: Mapping[str, object],
    *,
    fenced: bool,
) -> int | None:
    """Insert one dispatch row (see `sql_common.DISPATCH_COLUMNS`) claimed at `now` by
    `who` unless its (entry, window) has one; return the new row's id, or None."""
    entry, window, status, task_id, task_name, reason, first, count = row
    inserted = conn.execute(
        Q["insert_dispatch"],
        {
            "namespace": namespace,
            "entry": entry,
            "window": _us(window),
            "status": status,
            "task_id": task_id,
            "task_name": task_name,
            "reason": reason,
            "skipped_from": None if first is None else _us(first),
            "skipped_count": count,
            "now": _us(now),
            "fenced": fenced,
            **who,
        },
    ).fetchone()
    return None if inserted is None else int(inserted[0])


class _Busy(StoreUnavailable):
    """Another process held the write lock for longer than the busy timeout."""


def path_of(url: str) -> str:
    """Return the file path in `sqlite:///path` (relative) or `sqlite:////path` (absolute)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or len(url) == len(prefix):
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: write sqlite:///relative/path or "
            "sqlite:////absolute/path"
        )
    return url[len(prefix) :]


class SqliteConnection:
    """The file, this thread's connection to it, and the boundary around every call."""

    def __init__(
        self,
        url: str,
        *,
        busy_timeout: timedelta = timedelta(seconds=5),
        tick_lock_wait: timedelta = timedelta(milliseconds=100),
        clock: Callable[[], datetime] = system_clock,
    ) -> None:
        self.path = path_of(url)
        self.display_url = redact(url)
        self._busy_timeout = busy_timeout.total_seconds()
        # The tick lock is tried, not waited for: if another replica ticks, come back soon.
        self._tick_lock_wait = tick_lock_wait.total_seconds()
        self._clock = clock
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise StoreError(
                    f"SQLite store {self.display_url}: folder {str(parent)!r} does not exist"
                )
            try:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self._busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            except ValueError as exc:  # a NUL byte, or text the file system cannot encode
                raise StoreError(
                    f"SQLite store {self.display_url}: cannot open file {self.path!r} ({exc}); "
                    "fix the path in safebeat_url"
                ) from exc
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._conn = conn
        return self._conn

    @contextmanager
    def _write(
        self, action: str, busy_timeout: float | None = None
    ) -> Iterator[sqlite3.Connection]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on error.

        `busy_timeout` (seconds) overrides how long to wait for another writer.
        """
        with self._boundary(action) as conn:
            wait = self._busy_timeout if busy_timeout is None else busy_timeout
            conn.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _boundary(self, action: str) -> Iterator[sqlite3.Connection]:
        """Yield the connection; map sqlite3 errors onto safebeat's."""
        try:
            yield self._connection()
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise _Busy(f"SQLite store {self.display_url}: {action} failed: {text}") from exc
            if "no such table" in text:
                raise StoreError(
                    f"SQLite store {self.display_url}: {action} failed: {text}; "
                    "the schema is missing: run `safebeat migrate`"
                ) from exc
            self.close()
            raise StoreUnavailable(
                f"SQLite store {self.display_url}: {action} failed: {text}"
            ) from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store {self.display_url}: {action} failed: {exc}") from exc

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def clock(self) -> datetime:
        return self._clock()

    def _load(
        self, conn: sqlite3.Connection, namespace: str, names: Collection[str]
    ) -> dict[str, EntryState]:
        rows = conn.execute(
            Q["load_states"],
            {
                "namespace": namespace,
                "names": json.dumps(list(names)),
                "now": _us(self.clock()),
            },
        )
        return {row[0]: _state(row) for row in rows}
