"""Store URLs: which backend a URL names (built in, or added by a store plugin through the
`safebeat.stores` entry point group), and how to show it without its passwords.

A URL is shown as its driver reads it, never by cutting its text apart again: parsed by
libpq for PostgreSQL, by urllib (as redis-py reads it) for Redis and the other schemes, and
written back with each password as `***`. A password holding a character its URL should
have percent-encoded (`@`, `/`, `#`, `?`, `%`) may be cut short by the driver, leaving the
rest in the host, the path or the fragment; so where the driver's reading of a password
differs from the widest one the text allows, or the driver cannot read the URL at all,
everything up to the last `@` is hidden, and no driver message about the URL is shown.
"""

from __future__ import annotations

import functools
import importlib.metadata
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, unquote, unquote_plus, unquote_to_bytes, urlsplit

from safebeat.errors import ConfigError

SCHEMES = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "sqlite": "sqlite",
    "redis": "redis",
    "rediss": "redis",
    "unix": "redis",
    "redis+sentinel": "redis",
    "rediss+sentinel": "redis",
    "redis+cluster": "redis",
    "rediss+cluster": "redis",
    "memory": "memory",
    "django": "django",
}

_PASSWORD_IN_QUERY = re.compile(r"(?i)(password=)[^&\s]*")
#: From the first secret option of a query to its end: what the widest reading hides.
_SECRET_OPTIONS_ON = re.compile(r"(?i)((?:^|[?&;])[^&=?#;]*password=).*$", re.DOTALL)
#: Where one option of a query ends at the widest: before the next `&name=`.
_NEXT_OPTION = re.compile(r"&(?=[A-Za-z_][A-Za-z0-9_.-]*=)")
#: A secret option of a query, at the start of the query or after an `&`.
_SECRET_OPTION = re.compile(r"(?i)(?:^|&)([^&=]*password)=")
#: Characters of a libpq option's value shown as they are, for legibility.
_SHOWN_AS_IS = "/:@,"
#: What a store error says instead of a message about a URL its driver misread.
MISREAD = (
    "the URL's password seems to hold a character to percent-encode (@ as %40, / as %2F, "
    "? as %3F, # as %23, % as %25); the error is not shown, as it may quote part of it"
)


#: The entry point group through which another distribution adds a store: each entry
#: point's name is a URL scheme, its object what opens a store (see `safebeat.stores`).
ENTRY_POINT_GROUP = "safebeat.stores"
#: The backend name `backend_of` gives a scheme served by a store plugin.
PLUGIN = "plugin"
#: What a URL scheme may be (RFC 3986), compared in lower case as URLs' schemes are.
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*\Z")


@dataclass(frozen=True)
class PluginScheme:
    """A scheme some installed distribution serves through the `safebeat.stores` entry
    point group. `claims` lists every entry point naming it, as `name = value
    (distribution)`; `problem` says why it cannot be opened (None: it can)."""

    scheme: str
    entry_point: importlib.metadata.EntryPoint
    distribution: str
    claims: tuple[str, ...]
    problem: str | None


def _distribution_of(entry_point: importlib.metadata.EntryPoint) -> str:
    """The distribution an entry point belongs to, as `name version`."""
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return "an unknown distribution"
    return f"{dist.metadata['Name']} {dist.version}"


def _claim(entry_point: importlib.metadata.EntryPoint) -> str:
    return f"{entry_point.name} = {entry_point.value} ({_distribution_of(entry_point)})"


@functools.lru_cache(maxsize=1)
def plugin_schemes() -> dict[str, PluginScheme]:
    """The schemes installed distributions add through the `safebeat.stores` entry point
    group, each in lower case, read once per process (`plugin_schemes.cache_clear()`
    reads them again). Nothing is imported: an entry point is loaded when its scheme is
    opened. A scheme that cannot be opened keeps its reason in `problem`: a built-in
    scheme (never shadowed), a name that is no URL scheme, or several entry points."""
    claims: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        claims.setdefault(entry_point.name.lower(), []).append(entry_point)
    found = {}
    for scheme, entry_points in sorted(claims.items()):
        first = entry_points[0]
        named = tuple(_claim(e) for e in entry_points)
        problem = None
        if scheme in SCHEMES:
            problem = (
                f"the entry point {named[0]} of group {ENTRY_POINT_GROUP} claims the "
                f"built-in scheme {scheme}://, served by safebeat's own {SCHEMES[scheme]} "
                f"store (distribution safebeat); a plugin cannot replace a built-in store: "
                f"uninstall {_distribution_of(first)}, or have it name another scheme"
            )
        elif not _SCHEME.match(scheme):
            problem = (
                f"the entry point {named[0]} of group {ENTRY_POINT_GROUP} is named "
                f"{first.name!r}, which is no URL scheme (a letter, then letters, digits, "
                "+, - or .)"
            )
        elif len({e.value for e in entry_points}) > 1 or len(set(named)) > 1:
            problem = (
                f"{len(entry_points)} entry points of group {ENTRY_POINT_GROUP} claim the "
                f"scheme {scheme}://: {'; '.join(named)}; uninstall all but one of them"
            )
        found[scheme] = PluginScheme(
            scheme, first, _distribution_of(first), tuple(dict.fromkeys(named)), problem
        )
    return found


def known_schemes() -> list[str]:
    """Every scheme `safebeat_url` may have: the built-in ones and those plugins add."""
    plugins = [s for s, p in plugin_schemes().items() if p.problem is None]
    return sorted({*SCHEMES, *plugins})


def backend_of(url: str, *, setting: str = "safebeat_url") -> str:
    """Return the backend name for `url` (`PLUGIN` for a scheme a store plugin serves), or
    raise ConfigError naming the scheme.

    `setting` is what the error calls the URL: the key or variable it was read from.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    plugin = plugin_schemes().get(scheme)
    if plugin is not None and plugin.problem is not None:
        raise ConfigError(f"{setting} {redact(url)!r}: {plugin.problem}")
    if scheme in SCHEMES:
        return SCHEMES[scheme]
    if plugin is not None:
        return PLUGIN
    known = ", ".join(f"{s}://" for s in known_schemes())
    refused = [p.problem for p in plugin_schemes().values() if p.problem]
    raise ConfigError(
        f"{setting} {redact(url)!r}: unknown scheme {scheme!r}; use one of {known}"
        + "".join(f" (refused: {problem})" for problem in refused)
    )


@dataclass(frozen=True)
class Reading:
    """A URL as its driver reads it: how to show it, and what must never be shown.

    `secrets`: every text that may be a password (longest first), as written and decoded,
    under the driver's reading and the widest one. `misread`: the driver cannot read the
    URL, or reads its passwords otherwise than the widest reading does.
    """

    shown: str
    secrets: tuple[str, ...]
    misread: bool


@dataclass(frozen=True)
class _Parsed:
    """What a driver made of a URL: the URL written back with `***` for each password,
    the passwords it found, and how it decodes a password as written (to compare)."""

    shown: str
    passwords: frozenset[str]
    decode: Callable[[str], str]


def redact(url: str) -> str:
    """`url` as its driver reads it, every password shown as `***`; see `read`.

    Never fails, whatever the text.
    """
    return read(url).shown


@functools.lru_cache(maxsize=256)
def read(url: str) -> Reading:
    """Read `url` as its driver does (libpq for PostgreSQL, urllib as redis-py does for
    Redis and the rest) and write it back with every password as `***`.

    Where the driver cannot read it, or its passwords differ from the widest reading
    (each from the first `:` after `://` to the last `@`, and each secret query option up
    to the next `&name=`), the password holds a character the URL should have
    percent-encoded: the URL is shown as `scheme://***@` and what follows its last `@`.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:  # not a URL: no user, no password, perhaps options
        return Reading(_SECRET_OPTIONS_ON.sub(r"\1***", url), (), misread=False)
    reader = _READERS.get(SCHEMES.get(scheme.lower(), ""), _urllib)
    try:
        parsed: _Parsed | None = reader(url)
    except Exception:  # noqa: BLE001 - what the driver cannot read is shown the widest way
        parsed = None
    written = {text for text in _widest(rest) if text}
    secrets = written | {unquote(text) for text in written}
    if parsed is not None:
        secrets |= parsed.passwords
    ordered = tuple(sorted(secrets, key=len, reverse=True))
    if parsed is None or parsed.passwords != {parsed.decode(text) for text in written}:
        return Reading(_hidden(scheme, rest), ordered, misread=True)
    return Reading(parsed.shown, ordered, misread=False)


def _widest(rest: str) -> tuple[str, ...]:
    """The passwords of what follows `scheme://`, read as widely as the text allows: the
    userinfo up to the last `@`, and each secret query option up to the next `&name=`."""
    found = []
    userinfo, at, _ = rest.rpartition("@")
    if at and ":" in userinfo:
        found.append(userinfo.partition(":")[2])
    _, question, query = rest.partition("?")
    if question:
        for match in _SECRET_OPTION.finditer(query):
            value = query[match.end() :]
            end = _NEXT_OPTION.search(value)
            found.append(value if end is None else value[: end.start()])
    return tuple(found)


def _hidden(scheme: str, rest: str) -> str:
    """`scheme://rest` with everything up to its last `@`, and every query option from
    the first secret one on, hidden."""
    _, at, tail = rest.rpartition("@")
    tail = _SECRET_OPTIONS_ON.sub(r"\1***", tail)
    return f"{scheme}://***@{tail}" if at else f"{scheme}://{tail}"


def _secret(option: str) -> bool:
    """Whether a query option holds a password (`password`, `sslpassword`,
    `sentinel_password`, `ssl_password`)."""
    return option.lower().endswith("password")


def _libpq(url: str) -> _Parsed:
    """The URL as libpq reads it (`PQconninfoParse`, through psycopg)."""
    from psycopg.conninfo import conninfo_to_dict  # noqa: PLC0415 - the postgres extra

    options = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    passwords = frozenset(v for k, v in options.items() if _secret(k) and v)
    user = quote(options.pop("user", ""), safe="")
    if options.pop("password", ""):
        user += ":***"
    hosts = [h for h in options.pop("host", "").split(",") if h]
    ports = [p for p in options.pop("port", "").split(",") if p]
    dbname = options.pop("dbname", "")
    if any(h.startswith("/") for h in hosts) or (ports and len(ports) != len(hosts)):
        # Sockets, or ports libpq spreads over the hosts: shown as options, as written.
        options = {"host": ",".join(hosts), "port": ",".join(ports), **options}
        hosts = ports = []
    netloc = ",".join(
        (f"[{h}]" if ":" in h else quote(h, safe="")) + (f":{p}" if p else "")
        for h, p in itertools.zip_longest(hosts, ports, fillvalue="")
    )
    if user:
        netloc = f"{user}@{netloc}"
    query = "&".join(
        f"{quote(k, safe='')}={'***' if _secret(k) else quote(v, safe=_SHOWN_AS_IS)}"
        for k, v in options.items()
        if v
    )
    scheme = url.partition("://")[0]
    path = f"/{quote(dbname, safe='')}" if dbname else ""
    return _Parsed(
        f"{scheme}://{netloc}{path}" + (f"?{query}" if query else ""), passwords, unquote
    )


def _urllib(url: str) -> _Parsed:
    """The URL as urllib splits it, as redis-py (and safebeat's Sentinel and Cluster
    URLs, and Django's alias) read it; passwords as written."""
    parts = urlsplit(url)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    passwords = {password} if password else set()
    options = []
    for option in parts.query.split("&") if parts.query else []:
        key, equals, value = option.partition("=")
        if equals and _secret(unquote_plus(key)):
            passwords |= {value} if value else set()
            value = "***"
        options.append(f"{key}{equals}{value}")
    shown_user = f"{user}:***" if password else user
    netloc = f"{shown_user}@{hostport}" if shown_user else hostport
    scheme = url.partition("://")[0]
    query = "&".join(options)
    return _Parsed(
        f"{scheme}://{netloc}{parts.path}" + (f"?{query}" if query else ""),
        frozenset(passwords),
        lambda text: text,
    )


def _sqlite(url: str) -> _Parsed:
    """`sqlite:///path`: everything after `sqlite:///` is the file's path, as the SQLite
    store reads it; no password."""
    if not url.startswith("sqlite:///"):
        raise ValueError("not a sqlite:/// URL")
    return _Parsed(url, frozenset(), lambda text: text)


_READERS: dict[str, Callable[[str], _Parsed]] = {"postgres": _libpq, "sqlite": _sqlite}


def password_of(url: str) -> str | None:
    """The password of `url`'s userinfo as written, also when urlsplit rejects the URL."""
    try:
        return urlsplit(url).password
    except ValueError:
        _, separator, rest = url.partition("://")
        userinfo, at, _ = _netloc_and_tail(rest)[0].rpartition("@")
        return userinfo.partition(":")[2] if separator and at and ":" in userinfo else None


def _netloc_and_tail(rest: str) -> tuple[str, str]:
    """Split what follows `scheme://` where urlsplit would: at the first `/`, `?` or `#`."""
    end = next((i for i, char in enumerate(rest) if char in "/?#"), len(rest))
    return rest[:end], rest[end:]


def scrub(text: str, url: str) -> str:
    """`text` (a driver's message about `url`) without any password of `url`.

    About a URL its driver misread (see `read`), the message may quote any piece of the
    password, so it is replaced by one saying why, and how to write the URL.
    """
    reading = read(url)
    if reading.misread:
        return MISREAD
    for secret in reading.secrets:
        text = _as_token(secret).sub("***", text)
    return _PASSWORD_IN_QUERY.sub(r"\1***", text)


def _as_token(secret: str) -> re.Pattern[str]:
    """`secret` where it stands on its own: not inside a longer word or number, so that
    a password `on` hides no part of `connection` (a message quotes a password whole,
    between quotes, `:`, `@`, `=` or spaces, never glued into a word)."""
    before = r"(?<!\w)" if secret[:1].isalnum() or secret[:1] == "_" else ""
    after = r"(?!\w)" if secret[-1:].isalnum() or secret[-1:] == "_" else ""
    return re.compile(before + re.escape(secret) + after)


def django_alias(url: str, *, setting: str = "safebeat_url") -> str:
    """Return the database alias `django://alias` names (`default` for `django://`).

    Raise ConfigError naming the (redacted) URL when it cannot be read or holds a user or
    password: a Django store takes its credentials from `DATABASES`, never from the URL.
    """
    try:
        netloc = urlsplit(url).netloc
    except ValueError:  # its message may quote the password
        raise ConfigError(
            f"{setting} {redact(url)!r}: cannot read this django:// URL; "
            "write django:// or django://<alias of DATABASES>"
        ) from None
    if "@" in url.partition("://")[2]:
        # Anywhere, not only in what urlsplit calls the netloc: in django://app:pw#x@alias
        # it stops at the `#`, and "app:pw" would be taken for the alias, and shown.
        raise ConfigError(
            f"{setting} {redact(url)!r}: a django:// URL names a database alias, not a "
            "user or password; write django://<alias of DATABASES>"
        )
    return netloc or "default"


def check_utf8(url: str) -> None:
    """Raise ConfigError unless `url`, its %xx escapes decoded, is UTF-8 text.

    libpq's URLs must be (psycopg decodes every part as UTF-8, and fails on `%ff`).
    """
    try:
        unquote_to_bytes(url).decode("utf-8")
    except UnicodeError:  # %ff, %c3 alone, or a lone surrogate
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: its %xx escapes must spell UTF-8 text; "
            "percent-encode each byte of a character's UTF-8, e.g. %C3%A9 for é"
        ) from None
