"""Redis clients from safebeat URLs: a single server, Sentinel, or Redis Cluster.

- `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS, with redis-py's `ssl_*`
  query options) and `unix:///path/to/redis.sock[?db=N]`: one server.
- `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]`
  (`rediss+sentinel://` for TLS): the master Sentinel names, followed across failovers.
  Query options: `sentinel_username`, `sentinel_password`.
- `redis+cluster://[user:password@]host:port[,host:port…]` (`rediss+cluster://` for TLS):
  Redis Cluster; every key of one namespace lives in one hash slot.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
import redis.cluster
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from safebeat.errors import ConfigError
from safebeat.store_urls import MISREAD, read, redact, scrub

# Typed in some redis-py releases and untyped in others (5.x leaves these untyped, and
# types every command's reply `Awaitable[Any] | Any`): called as Any, so the type check
# passes the same way on every release the package supports.
_Redis: Any = redis.Redis
_RedisCluster: Any = redis.cluster.RedisCluster
_Sentinel: Any = redis.sentinel.Sentinel
_ClusterNode: Any = redis.cluster.ClusterNode
_Retry: Any = Retry
_NoBackoff: Any = NoBackoff


class Client(Protocol):
    """A Redis client (one server, Sentinel's master, or a cluster) as the store uses it:
    the commands it sends and their arguments; replies as redis-py decodes them. The store
    holds its client as this rather than as redis-py's classes, whose types differ from
    release to release."""

    def get(self, name: str) -> Any: ...
    def set(self, name: str, value: str | int, *, nx: bool = False) -> Any: ...
    def exists(self, *names: str) -> int: ...
    def hkeys(self, name: str) -> list[Any]: ...
    def hgetall(self, name: str) -> dict[Any, Any]: ...
    def zrevrange(self, name: str, start: int, end: int, *, withscores: bool = False) -> Any: ...
    def scan_iter(self, *, match: str, count: int) -> Iterator[Any]: ...
    def info(self, section: str) -> dict[str, Any]: ...
    def time(self) -> tuple[int, int]: ...
    def register_script(self, script: str) -> Callable[..., Any]: ...
    def close(self) -> None: ...


SINGLE_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
_SENTINEL_OPTIONS = {"sentinel_username", "sentinel_password"}
#: Query options of a one-server URL that redis-py reads from text. Any other would reach
#: redis-py's connection as a string and fail on first use: a libpq option like `sslmode`
#: (TypeError), or one that wants a Python object, like `retry` or `retry_on_error`.
_OPTIONS = frozenset(
    {
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_read_size",
        "socket_keepalive",
        "retry_on_timeout",
        "health_check_interval",
        "max_connections",
        "protocol",
        "client_name",
        "lib_name",
        "lib_version",
        "username",
        "password",
    }
)
#: Numeric options redis-py reads from the URL but leaves for the socket to refuse.
_NUMBERS: dict[str, tuple[float, float]] = {
    "socket_timeout": (0.001, 1e9),
    "socket_connect_timeout": (0.001, 1e9),
    "socket_read_size": (1, 1e9),
}
#: Options redis-py must convert from the URL's text. A release without a parser for one
#: (redis-py 5.0 has none for `socket_read_size` or `ssl_min_version`) hands the text on to
#: the connection, where it fails on first use.
_CONVERTED = frozenset({*_NUMBERS, "ssl_min_version"})
#: More options of a `rediss://` URL, for TLS.
_TLS_OPTIONS = frozenset(
    {
        "ssl_keyfile",
        "ssl_certfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_check_hostname",
        "ssl_ciphers",
        "ssl_min_version",
        "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
    }
)


@dataclass(frozen=True)
class Timeouts:
    """Socket timeouts, in seconds: connecting, and waiting for any one reply."""

    connect: float = 5.0
    reply: float = 5.0


def _common(timeouts: Timeouts) -> dict[str, Any]:
    return {
        "socket_timeout": timeouts.reply,
        "socket_connect_timeout": timeouts.connect,
        # No silent retries: a script that timed out may have run, and safebeat's own
        # backoff decides when to try again.
        "retry": _Retry(_NoBackoff(), 0),
        "client_name": "safebeat",
        "decode_responses": True,
    }


def connect(url: str, timeouts: Timeouts) -> Client:
    """Return a client for `url` (no connection is made until the first command)."""
    try:
        return _connect(url, timeouts)
    except ConfigError:
        if read(url).misread:  # the message may quote a piece of the password as a host
            raise ConfigError(f"safebeat_url {redact(url)!r}: {MISREAD}") from None
        raise


def _connect(url: str, timeouts: Timeouts) -> Client:
    scheme = url.split("://", 1)[0].lower()
    if scheme in SINGLE_SCHEMES:
        return _single(url, scheme, timeouts)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel(url, timeouts)
    if scheme in CLUSTER_SCHEMES:
        return _cluster(url, timeouts)
    raise ConfigError(f"safebeat_url {redact(url)!r}: not a Redis URL")


def _single(url: str, scheme: str, timeouts: Timeouts) -> Client:
    """A client of one server, its URL's options checked now rather than on first use."""
    try:
        client: Any = _Redis.from_url(url, **_common(timeouts))
    except ValueError as exc:
        raise ConfigError(f"safebeat_url {redact(url)!r}: {scrub(str(exc), url)}") from None
    known = _OPTIONS | _TLS_OPTIONS if scheme == "rediss" else _OPTIONS
    given = {key for key, _ in parse_qsl(urlsplit(url).query)}
    unknown = given - known
    if unknown:
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: unknown option(s) {sorted(unknown)}; "
            f"{scheme}:// URLs take {', '.join(sorted(known))}"
        )
    pool = client.connection_pool
    options = {k: v for k, v in pool.connection_kwargs.items() if k in given}
    as_text = sorted(key for key in _CONVERTED & options.keys() if isinstance(options[key], str))
    if as_text:
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: redis-py {redis.__version__} does not read "
            f"{', '.join(as_text)} from a URL (a later release does); leave it out"
        )
    _check_values(url, options)
    try:
        # What the first command does, minus the socket: redis-py checks its arguments.
        pool.connection_class(**pool.connection_kwargs)
    except (ValueError, TypeError, redis.exceptions.RedisError) as exc:
        raise ConfigError(f"safebeat_url {redact(url)!r}: {scrub(str(exc), url)}") from None
    return cast("Client", client)


def _check_values(url: str, options: dict[str, Any]) -> None:
    """Refuse option values from the URL that the socket or TLS would refuse on first use."""
    for key, (low, high) in _NUMBERS.items():
        if key in options and not low <= options[key] <= high:  # NaN too
            raise ConfigError(
                f"safebeat_url {redact(url)!r}: {key}={options[key]}: expected a number "
                f"from {low:g} to {high:g}"
            )
    if "ssl_min_version" in options:
        try:
            ssl.TLSVersion(options["ssl_min_version"])
        except ValueError:
            choices = ", ".join(f"{v.value} ({v.name})" for v in ssl.TLSVersion)
            raise ConfigError(
                f"safebeat_url {redact(url)!r}: ssl_min_version={options['ssl_min_version']}: "
                f"expected one of {choices}"
            ) from None
    if options.get("ssl_keyfile") and not options.get("ssl_certfile"):
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: ssl_keyfile needs ssl_certfile, the certificate "
            "of that key"
        )


def _number(text: str) -> int:
    """The port or database number `text` names; -1 unless it is 1 to 5 ASCII digits."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 5 else -1


@dataclass(frozen=True)
class _MultiHost:
    username: str | None
    password: str | None
    hosts: list[tuple[str, int]]
    path: list[str]
    options: dict[str, str]
    tls: bool


def _parse_multi_host(url: str, default_port: int) -> _MultiHost:
    """Split `scheme://[user:password@]h1:p1,h2:p2/path?query`, which urlsplit cannot."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unbalanced [ or ]
        raise ConfigError(f"safebeat_url {redact(url)!r}: cannot read the host list") from None
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username = password = None
    if userinfo:
        user, _, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) or None
    hosts = []
    for item in filter(None, hostlist.split(",")):
        host, port = item, default_port
        if item.startswith("["):  # [::1]:26379
            host, _, rest = item[1:].partition("]")
            if rest.startswith(":"):
                port = _number(rest[1:])
            elif rest:  # [::1]x
                port = -1
        elif ":" in item:
            host, _, number = item.rpartition(":")
            port = _number(number)
        if not host or not 0 < port < 65536:
            raise ConfigError(f"safebeat_url {redact(url)!r}: bad host:port {item!r}")
        hosts.append((host, port))
    if not hosts:
        raise ConfigError(f"safebeat_url {redact(url)!r}: no host given")
    return _MultiHost(
        username=username,
        password=password,
        hosts=hosts,
        path=[unquote(p) for p in parts.path.split("/") if p],
        options=dict(parse_qsl(parts.query)),
        tls=parts.scheme.lower().startswith("rediss"),
    )


def _sentinel(url: str, timeouts: Timeouts) -> Client:
    spec = _parse_multi_host(url, 26379)
    unknown = set(spec.options) - _SENTINEL_OPTIONS
    if unknown:
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: unknown option(s) {sorted(unknown)}; "
            f"Sentinel URLs take {sorted(_SENTINEL_OPTIONS)}"
        )
    if not spec.path or len(spec.path) > 2 or (len(spec.path) == 2 and _number(spec.path[1]) < 0):
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: write redis+sentinel://host:port,…/service[/db]"
        )
    common = _common(timeouts)
    sentinel_options = {
        "socket_timeout": timeouts.reply,
        "socket_connect_timeout": timeouts.connect,
        "username": spec.options.get("sentinel_username"),
        "password": spec.options.get("sentinel_password"),
        "ssl": spec.tls,
    }
    sentinel = _Sentinel(
        spec.hosts,
        sentinel_kwargs=sentinel_options,
        ssl=spec.tls,
        **{k: v for k, v in common.items() if k != "decode_responses"},
    )
    master: Client = sentinel.master_for(
        spec.path[0],
        db=_number(spec.path[1]) if len(spec.path) == 2 else 0,
        username=spec.username,
        password=spec.password,
        decode_responses=True,
    )
    return master


def _cluster(url: str, timeouts: Timeouts) -> Client:
    spec = _parse_multi_host(url, 6379)
    if spec.path or spec.options:
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: Redis Cluster has no databases or options here; "
            "write redis+cluster://host:port,host:port"
        )
    common = _common(timeouts)
    cluster: Client = _RedisCluster(
        startup_nodes=[_ClusterNode(host, port) for host, port in spec.hosts],
        username=spec.username,
        password=spec.password,
        ssl=spec.tls,
        require_full_coverage=True,
        **common,
    )
    return cluster
