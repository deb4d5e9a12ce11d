"""Settings -> one frozen, validated `Config`, read once at startup.

Each setting is a lowercase `safebeat_*` key of the Celery app's configuration (with
Django's `CELERY` namespace: `CELERY_SAFEBEAT_URL`), and each can be overridden by an
environment variable in upper case (`SAFEBEAT_URL`). An unknown key or a bad value is a
`ConfigError` naming it.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, TypeAlias, TypeVar

from safebeat.errors import ConfigError, shown
from safebeat.limits import MAX_DURATION, MIN_TIMEOUT, check_namespace
from safebeat.store_urls import backend_of, django_alias
from safebeat.windows import Misfire, Overlap, Policy

_Choice = TypeVar("_Choice", Misfire, Overlap)

logger = logging.getLogger("safebeat.config")

DEFAULT_URL = "sqlite:///safebeat.sqlite3"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_KUBERNETES_SERVICE_VAR = re.compile(r"^SAFEBEAT_(SERVICE_HOST|SERVICE_PORT|PORT)(_|$)")
#: Variables that carry a window, not a setting: `safebeat exec` reads the scheduled time
#: from the first two and gives its command its window in the last two.
WINDOW_VARIABLES = frozenset(
    {"SAFEBEAT_SCHEDULED_TIME", "SAFEBEAT_JOB_NAME", "SAFEBEAT_ENTRY", "SAFEBEAT_WINDOW"}
)
#: Variables of the `safebeat` command itself, not settings: SAFEBEAT_DEBUG (show
#: tracebacks), and those of `safebeat web`'s options.
COMMAND_VARIABLES = frozenset(
    {
        "SAFEBEAT_DEBUG",
        "SAFEBEAT_WEB_TOKEN",
        "SAFEBEAT_WEB_TOKEN_ACTOR",
        "SAFEBEAT_WEB_USER",
        "SAFEBEAT_WEB_PASSWORD",
        "SAFEBEAT_WEB_READ_ONLY",
        "SAFEBEAT_WEB_ALLOWED_HOSTS",
    }
)
_KUBERNETES_SERVICE_LINK = re.compile(r"^(tcp|udp|sctp)://[^/]+:\d+$")
#: What a Redis store does about an eviction policy that could delete claims.
RedisEviction: TypeAlias = Literal["warn", "refuse", "ignore"]
REDIS_EVICTION_CHECKS: tuple[RedisEviction, ...] = ("warn", "refuse", "ignore")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: object, name: str) -> timedelta:
    """Read seconds (number), a timedelta, or text such as "30", "30s", "5m", "2h", "30d".

    Raise ConfigError naming `name` for anything else, a negative duration, NaN, or more
    than `MAX_DURATION` (infinity included).
    """
    seconds: float
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int) and not isinstance(value, bool):
        # An int beyond a float's range is simply too long: don't let float() overflow.
        seconds = float(max(-(10**300), min(value, 10**300)))
    elif isinstance(value, float):
        seconds = value
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ConfigError(
            f"{name}={shown(value)}: expected seconds (a number), a timedelta, "
            'or text like "30s", "5m", "2h", "30d"'
        )
    if seconds < 0:
        raise ConfigError(f"{name}={shown(value)}: must not be negative")
    if not seconds <= MAX_DURATION.total_seconds():  # also NaN, which compares false
        raise ConfigError(
            f"{name}={shown(value)}: expected a finite duration of at most {MAX_DURATION.days}d"
        )
    return timedelta(seconds=seconds)


def _positive_duration(value: object, name: str) -> timedelta:
    """A timeout or period: at least 1 ms (`limits.MIN_TIMEOUT`), since PostgreSQL reads a
    timeout written as `0ms` as none at all."""
    duration = parse_duration(value, name)
    if duration <= timedelta(0):
        raise ConfigError(f"{name}={shown(value)}: must be greater than zero")
    if duration < MIN_TIMEOUT:
        raise ConfigError(
            f"{name}={shown(value)}: must be at least 1ms, the shortest timeout every store "
            "keeps (limits: docs/limits.md)"
        )
    return duration


def _optional_duration(value: object, name: str) -> timedelta | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in {"", "none", "off"}):
        return None
    return parse_duration(value, name)


def _optional_positive_duration(value: object, name: str) -> timedelta | None:
    """A timeout of at least 1 ms, or None for the default (None, "", "none", "off")."""
    if value is None or (isinstance(value, str) and value.strip().lower() in {"", "none", "off"}):
        return None
    return _positive_duration(value, name)


def _positive_int(value: object, name: str) -> int:
    try:
        number = int(str(value)) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < 1:
        raise ConfigError(f"{name}={shown(value)}: expected a whole number of at least 1")
    return number


def _optional_count(value: object, name: str) -> int | None:
    """A whole number of at least 1, or None for off (None, "", "off")."""
    if value is None or (isinstance(value, str) and value.strip().lower() in {"", "off"}):
        return None
    return _positive_int(value, name)


def _port(value: object, name: str) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in {"", "off"}):
        return None
    port = _positive_int(value, name)
    if port > 65535:
        raise ConfigError(f"{name}={shown(value)}: a TCP port is at most 65535")
    return port


def _word(value: object) -> str:
    """A setting's value as lowercase text; "" when it has none (a 5000-digit int)."""
    try:
        return str(value).strip().lower()
    except ValueError:
        return ""


def _boolean(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    text = _word(value)
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name}={shown(value)}: expected true or false")


def _one_of(kind: type[_Choice], value: object, name: str) -> _Choice:
    try:
        return kind(_word(value))
    except ValueError:
        choices = ", ".join(repr(m.value) for m in kind)
        raise ConfigError(f"{name}={shown(value)}: expected one of {choices}") from None


def parse_misfire(value: object, name: str) -> Misfire:
    return _one_of(Misfire, value, name)


def parse_overlap(value: object, name: str) -> Overlap:
    return _one_of(Overlap, value, name)


def _url(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name}: expected a store URL such as {DEFAULT_URL!r}")
    url = value.strip()
    if backend_of(url, setting=name) == "django":  # raises ConfigError naming the scheme
        django_alias(url, setting=name)  # raises ConfigError for a django:// URL with no alias
    return url


def _redis_eviction(value: object, name: str) -> RedisEviction:
    text = _word(value)
    for choice in REDIS_EVICTION_CHECKS:
        if text == choice:
            return choice
    choices = ", ".join(repr(c) for c in REDIS_EVICTION_CHECKS)
    raise ConfigError(f"{name}={shown(value)}: expected one of {choices}")


def _namespace(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name}={shown(value)}: expected a non-empty name")
    return check_namespace(value.strip(), name)  # a LimitError is a ConfigError


@dataclass(frozen=True)
class Config:
    """Every safebeat setting, validated. Durations are timedeltas."""

    url: str = DEFAULT_URL
    namespace: str = "default"
    misfire: Misfire = Misfire.LATEST
    grace: timedelta | None = None
    catchup_limit: int = 100
    claim_timeout: timedelta = timedelta(seconds=30)
    retention: timedelta = timedelta(days=30)
    metrics_port: int | None = None
    worker_metrics_port: int | None = None
    #: Serve /livez and /readyz on this port (None: off).
    probe_port: int | None = None
    #: How long the tick loop may go without a tick before /livez fails (None: derived
    #: from the scheduler's max interval, `safebeat.beat.probes.default_liveness_timeout`).
    liveness_timeout: timedelta | None = None
    auto_migrate: bool = True
    lock_timeout: timedelta = timedelta(seconds=5)
    overlap: Overlap = Overlap.ALLOW
    overlap_timeout: timedelta = timedelta(hours=1)  # superseded by execution_lease
    execution_lease: timedelta = timedelta(seconds=10)
    #: Pause an entry after this many consecutive failed runs (None: never).
    pause_after_failures: int | None = None
    redis_eviction: RedisEviction = "warn"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def policy(self) -> Policy:
        """The default missed-window policy of entries that set none of their own."""
        return Policy(self.misfire, self.grace, self.catchup_limit)


_PARSERS: dict[str, Callable[[object, str], Any]] = {
    "url": _url,
    "namespace": _namespace,
    "misfire": parse_misfire,
    "grace": _optional_duration,
    "catchup_limit": _positive_int,
    "claim_timeout": _positive_duration,
    "retention": _positive_duration,
    "metrics_port": _port,
    "worker_metrics_port": _port,
    "probe_port": _port,
    "liveness_timeout": _optional_positive_duration,
    "auto_migrate": _boolean,
    "lock_timeout": _positive_duration,
    "overlap": parse_overlap,
    "overlap_timeout": _positive_duration,
    "execution_lease": _positive_duration,
    "pause_after_failures": _optional_count,
    "redis_eviction": _redis_eviction,
}
SETTINGS = tuple(f"safebeat_{key}" for key in _PARSERS)


def _conf_keys(conf: Mapping[str, Any], app_namespace: str | None) -> dict[str, str]:
    """Map each safebeat setting found in `conf` (any case, any namespace) to its key."""
    prefix = f"{app_namespace.lower()}_" if app_namespace else None
    found: dict[str, str] = {}
    for key in conf:
        lowered = str(key).lower()
        if prefix and lowered.startswith(prefix + "safebeat_"):
            lowered = lowered[len(prefix) :]
        if lowered.startswith("safebeat_"):
            found[lowered] = str(key)
    return found


def _unknown(name: str, where: str, *, variable: bool = False) -> ConfigError:
    """The error for an unknown key, suggesting the closest one as it is spelt there:
    `safebeat_url` in a Celery configuration, `SAFEBEAT_URL` in the environment."""
    close = difflib.get_close_matches(name.lower(), SETTINGS, n=1)
    spell = str.upper if variable else str
    hint = f"; did you mean {spell(close[0])!r}?" if close else ""
    known = ", ".join(spell(setting) for setting in SETTINGS)
    return ConfigError(f"unknown setting {name!r} in {where}{hint} (known: {known})")


def load_config(
    conf: Mapping[str, Any],
    *,
    app_main: str | None = None,
    app_namespace: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Read the safebeat settings of a Celery configuration and the environment.

    Precedence: environment variable > Celery setting > default.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for setting, key in _conf_keys(conf, app_namespace).items():
        short = setting.removeprefix("safebeat_")
        if short not in _PARSERS:
            raise _unknown(key, "the Celery configuration")
        values[short] = _PARSERS[short](conf[key], key)
        sources[short] = key
    for var, raw in environ.items():
        if not var.startswith("SAFEBEAT_") or var.startswith("SAFEBEAT_TEST_"):
            continue
        if var in WINDOW_VARIABLES or var in COMMAND_VARIABLES:
            continue
        short = var.removeprefix("SAFEBEAT_").lower()
        if _KUBERNETES_SERVICE_VAR.match(var):
            continue  # Kubernetes sets these for a Service named "safebeat"
        if _KUBERNETES_SERVICE_LINK.match(raw):
            # A Service named like safebeat-metrics sets SAFEBEAT_METRICS_PORT to
            # tcp://10.0.0.7:9100: a service link, not our setting.
            logger.warning("ignoring %s=%r: a Kubernetes service link, not a setting", var, raw)
            continue
        if short not in _PARSERS:
            logger.warning("ignoring %s", _unknown(var, "the environment", variable=True))
            continue
        values[short] = _PARSERS[short](raw, var)
        sources[short] = f"${var}"
    _check_ports(values, sources)
    if "namespace" not in values:
        main = app_main if app_main and app_main != "__main__" else "default"
        values["namespace"] = _namespace(main, "the Celery app's main name (safebeat_namespace)")
    return Config(**values, sources=sources)


def _check_ports(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """The probes and the metrics need a port each: one server cannot be both."""
    probe, metrics = values.get("probe_port"), values.get("metrics_port")
    if probe is not None and probe == metrics:
        raise ConfigError(
            f"{sources['probe_port']}={probe} is also {sources['metrics_port']}: "
            "the probes and the metrics need a port each"
        )


def url_origin(config: Config) -> str:
    """Where `config.url` came from, for a message about the store: the variable wins over
    the setting, so a stale `SAFEBEAT_URL` is a common surprise."""
    source = config.sources.get("url")
    if source is None:
        return "the default (neither SAFEBEAT_URL nor safebeat_url is set)"
    if source.startswith("$"):
        return f"the {source[1:]} environment variable"
    if source.startswith("--"):
        return f"the {source} option"
    return f"the {source} setting"


def config_from_app(app: Any, environ: Mapping[str, str] | None = None) -> Config:
    """Read the safebeat settings of a Celery app (see load_config)."""
    return load_config(app.conf, app_main=app.main, app_namespace=app.namespace, environ=environ)
