"""Store URLs: which backend a URL names, and how to show it without its password."""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes, urlsplit, urlunsplit

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


def backend_of(url: str, *, setting: str = "safebeat_url") -> str:
    """Return the backend name for `url`, or raise ConfigError naming the scheme.

    `setting` is what the error calls the URL: the key or variable it was read from.
    """
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    try:
        return SCHEMES[scheme]
    except KeyError:
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        raise ConfigError(
            f"{setting} {redact(url)!r}: unknown scheme {scheme!r}; use one of {known}"
        ) from None


def redact(url: str) -> str:
    """Return `url` with any password replaced by `***` (userinfo and `password=` query).

    Works for every scheme, and for text urlsplit rejects (`django://[`) too.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return _redact_unparsable(url)
    if parts.password is None and not _PASSWORD_IN_QUERY.search(parts.query):
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostport}"
    query = _PASSWORD_IN_QUERY.sub(r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_unparsable(url: str) -> str:
    """Hide the password of a URL urlsplit rejects (an unbalanced `[`), reading it as it would."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return _PASSWORD_IN_QUERY.sub(r"\1***", url)
    netloc, tail = _netloc_and_tail(rest)
    userinfo, at, hostport = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:***@{hostport}"
    return f"{scheme}://{netloc}" + _PASSWORD_IN_QUERY.sub(r"\1***", tail)


def _netloc_and_tail(rest: str) -> tuple[str, str]:
    """Split what follows `scheme://` where urlsplit would: at the first `/`, `?` or `#`."""
    end = next((i for i, char in enumerate(rest) if char in "/?#"), len(rest))
    return rest[:end], rest[end:]


def password_of(url: str) -> str | None:
    """The password of `url`'s userinfo as written, also when urlsplit rejects the URL."""
    try:
        return urlsplit(url).password
    except ValueError:
        _, separator, rest = url.partition("://")
        userinfo, at, _ = _netloc_and_tail(rest)[0].rpartition("@")
        return userinfo.partition(":")[2] if separator and at and ":" in userinfo else None


def scrub(text: str, url: str) -> str:
    """Remove the password of `url` from `text` (a driver's error message, say)."""
    password = password_of(url)
    if password:
        text = text.replace(password, "***")
    return _PASSWORD_IN_QUERY.sub(r"\1***", text)


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
    if "@" in netloc:
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
