"""Store URLs: which backend a URL names, and how to show it without its password."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

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


def backend_of(url: str) -> str:
    """Return the backend name for `url`, or raise ConfigError naming the scheme."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    try:
        return SCHEMES[scheme]
    except KeyError:
        known = ", ".join(f"{s}://" for s in sorted(SCHEMES))
        raise ConfigError(
            f"safebeat_url {redact(url)!r}: unknown scheme {scheme!r}; use one of {known}"
        ) from None


def redact(url: str) -> str:
    """Return `url` with any password replaced by `***` (userinfo and `password=` query)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
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


def scrub(text: str, url: str) -> str:
    """Remove the password of `url` from `text` (a driver's error message, say)."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password:
        text = text.replace(password, "***")
    return _PASSWORD_IN_QUERY.sub(r"\1***", text)
