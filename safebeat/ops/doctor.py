"""`safebeat doctor`: the common mistakes we can see from the store and the settings.

Each check returns findings: `problem` (something is wrong now: the command exits
non-zero), `warning` (worth a look) or `ok`. Checks never raise; a check that cannot run
says why.
"""

from __future__ import annotations

import difflib
import enum
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any

from safebeat.config import Config, config_from_app, url_origin
from safebeat.entries import Entry
from safebeat.errors import EntryError, SafebeatError
from safebeat.liveness import LIVE_WITHIN, is_live
from safebeat.ops.overview import empty_namespace
from safebeat.records import Status
from safebeat.store_urls import plugin_schemes, redact
from safebeat.stores.protocols import AdminStore

#: A replica whose heartbeat is older than this counts as gone (safebeat.liveness).
ALIVE_FOR = LIVE_WITHIN
#: Store clock vs this host's clock: beyond this, logs and the store disagree visibly.
SKEW_WARNING = timedelta(seconds=2)
#: History rows scanned for claims left unsent.
UNSENT_SCAN = 5000


class Level(str, enum.Enum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"


@dataclass(frozen=True)
class Finding:
    check: str
    level: Level
    message: str


@dataclass(frozen=True)
class Context:
    """What the checks look at: the store, the settings and, with `-A`, the app."""

    store: AdminStore
    config: Config
    app: Any | None = None
    entries: Mapping[str, Entry] | None = None
    broken: Mapping[str, EntryError] | None = None


Check = Callable[[Context], list[Finding]]


def run_checks(context: Context) -> list[Finding]:
    """Run every check: those of the settings alone first, then the store's, and the others
    only if the store answers."""
    findings = [
        *check_store_url(context),
        *check_scheduler(context),
        *check_lock_timeout(context),
    ]
    store = check_store(context)
    findings += store
    if any(f.level is Level.PROBLEM for f in store):
        return findings
    for check in (
        check_namespace,
        check_clock,
        check_time_zones,
        check_backend,
        check_publisher_confirms,
        check_entries,
        check_replicas,
        check_unsent_claims,
    ):
        try:
            findings += check(context)
        except SafebeatError as exc:
            findings.append(Finding(check.__name__.removeprefix("check_"), Level.PROBLEM, str(exc)))
    return findings


def check_store_url(context: Context) -> list[Finding]:
    """Where the store URL came from; a warning when `SAFEBEAT_URL` and the app's
    `safebeat_url` are both set and differ, since the variable silently wins."""
    config = context.config
    scheme, separator, _ = config.url.partition("://")
    plugin = plugin_schemes().get(scheme.lower()) if separator else None
    served = f", served by the store plugin {plugin.claims[0]}" if plugin else ""
    found = Finding(
        "store URL", Level.OK, f"{redact(config.url)} from {url_origin(config)}{served}"
    )
    variable = os.environ.get("SAFEBEAT_URL")
    if context.app is None or variable is None or config.sources.get("url") != "$SAFEBEAT_URL":
        return [found]
    try:
        setting = config_from_app(context.app, environ={})
    except SafebeatError:  # the setting's own error is reported where beat reads it
        return [found]
    if "url" not in setting.sources or setting.url == variable.strip():
        return [found]
    return [
        Finding(
            "store URL",
            Level.WARNING,
            f"SAFEBEAT_URL ({redact(variable.strip())}) wins over the app's "
            f"{setting.sources['url']} ({redact(setting.url)}); unset one of them, so that "
            "every beat, worker and command uses the same store",
        )
    ]


def check_lock_timeout(context: Context) -> list[Finding]:
    """A warning when `safebeat_lock_timeout` is above half of `safebeat_execution_lease`.

    A worker renews its leases every third of the lease; a renewal queued behind a row
    lock fails after the lock timeout and is retried at once. With the lock timeout at
    most half the lease, that retry starts by five sixths of the lease, so a live run
    keeps its lease through one blocked renewal; above half, the margin shrinks, and at
    two thirds one blocked renewal lets a live run's lease lapse (it is then taken over:
    two runs of one window).
    """
    config = context.config
    lock, lease = config.lock_timeout, config.execution_lease
    if lock <= lease / 2:
        return []
    names = {
        key: config.sources.get(key, f"safebeat_{key}")
        for key in ("lock_timeout", "execution_lease")
    }
    return [
        Finding(
            "lock timeout",
            Level.WARNING,
            f"{names['lock_timeout']} ({lock.total_seconds():g}s) is above half of "
            f"{names['execution_lease']} ({lease.total_seconds():g}s): a worker's lease "
            "renewal blocked on a row lock waits that long before it is retried, and a "
            "live run's lease can lapse meanwhile (it is then taken over beside the live "
            "run); keep safebeat_lock_timeout at most half of safebeat_execution_lease",
        )
    ]


#: The schedulers safebeat ships, as `beat_scheduler` or `-S` names them.
SCHEDULERS = ("safebeat.Scheduler", "safebeat.contrib.django.DatabaseScheduler")
#: Celery's own default `beat_scheduler`, and other schedulers a misspelling may be close to.
_CELERY_DEFAULT = "celery.beat:PersistentScheduler"
_OTHER_SCHEDULERS = (_CELERY_DEFAULT, "django_celery_beat.schedulers:DatabaseScheduler")


def check_scheduler(context: Context) -> list[Finding]:
    """The app's configured `beat_scheduler` (with -A) can be loaded and is safebeat's; a
    misspelt name gets the closest one. (`-S` on beat's command line, which wins over the
    setting, cannot be seen from here.)"""
    if context.app is None:
        return []
    from celery.utils.imports import symbol_by_name  # noqa: PLC0415 - only with -A

    from safebeat.beat.scheduler import Scheduler  # noqa: PLC0415 - only with -A

    name = context.app.conf.beat_scheduler
    if not isinstance(name, str):
        name = f"{name.__module__}.{name.__qualname__}"
    if name.startswith("django_celery_beat."):  # whether or not Django is set up here
        prefix = context.app.namespace
        setting = f"{prefix}_BEAT_SCHEDULER" if prefix else "beat_scheduler"
        return [
            Finding(
                "scheduler",
                Level.WARNING,
                f"{setting} {name!r} is django-celery-beat's, which sends every window "
                f"from each replica: set {setting} = "
                "'safebeat.contrib.django.DatabaseScheduler' (or start beat with -S "
                "safebeat.contrib.django.DatabaseScheduler); it runs the same PeriodicTask "
                "rows (docs/migrating-from-django-celery-beat.md)",
            )
        ]
    try:
        scheduler = symbol_by_name(name)
    except (ImportError, AttributeError, ValueError) as exc:
        close = difflib.get_close_matches(name, (*SCHEDULERS, *_OTHER_SCHEDULERS), n=1)
        hint = (
            f"; did you mean {close[0]!r}?" if close else f" (safebeat's: {', '.join(SCHEDULERS)})"
        )
        return [
            Finding(
                "scheduler",
                Level.PROBLEM,
                f"beat_scheduler {name!r} cannot be loaded ({type(exc).__name__}: {exc}){hint}",
            )
        ]
    except Exception as exc:  # noqa: BLE001 - importing it ran code that failed (Django setup)
        return [Finding("scheduler", Level.WARNING, f"beat_scheduler {name!r}: {exc}")]
    if isinstance(scheduler, type) and issubclass(scheduler, Scheduler):
        return [Finding("scheduler", Level.OK, f"beat_scheduler {name!r} is safebeat's")]
    return [_not_safebeat(name)]


def _not_safebeat(name: str) -> Finding:
    """What to say of `beat_scheduler` `name`, a scheduler that is not safebeat's."""
    if name == _CELERY_DEFAULT:
        return Finding(
            "scheduler",
            Level.OK,
            f"beat_scheduler is Celery's default ({name}): start beat with "
            "-S safebeat.Scheduler, or set beat_scheduler = 'safebeat.Scheduler'",
        )
    return Finding(
        "scheduler",
        Level.WARNING,
        f"beat_scheduler {name!r} is not safebeat's: a beat started without "
        "-S safebeat.Scheduler runs it, and each replica sends every window",
    )


def check_store(context: Context) -> list[Finding]:
    """The store answers, and its schema is the one this safebeat writes."""
    store = context.store
    try:
        store.clock()
    except SafebeatError as exc:
        return [Finding("store", Level.PROBLEM, f"cannot reach the store: {exc}")]
    expected = store.expected_schema_version
    try:
        version = store.schema_version()
    except SafebeatError as exc:
        return [Finding("store", Level.PROBLEM, f"cannot read the schema version: {exc}")]
    if version < expected:
        return [
            Finding(
                "store",
                Level.PROBLEM,
                f"{store.display_url} is at schema version {version}, this safebeat needs "
                f"{expected}: run `safebeat migrate` (or start beat with safebeat_auto_migrate)",
            )
        ]
    return [Finding("store", Level.OK, f"{store.display_url} answers, schema version {version}")]


def check_namespace(context: Context) -> list[Finding]:
    """The namespace has registered entries; if not, which namespaces the store holds."""
    store, namespace = context.store, context.config.namespace
    count = len(store.states(namespace))
    if count:
        return [Finding("namespace", Level.OK, f"namespace {namespace!r}: {count} entries")]
    return [Finding("namespace", Level.PROBLEM, empty_namespace(store, namespace))]


def check_clock(context: Context) -> list[Finding]:
    """This host's clock against the store's: windows follow the store's."""
    before = datetime.now(timezone.utc)
    store_now = context.store.clock()
    after = datetime.now(timezone.utc)
    skew = store_now - (before + (after - before) / 2)
    text = f"store clock is {skew.total_seconds():+.3f} s from this host's"
    if abs(skew) > SKEW_WARNING:
        return [
            Finding(
                "clock",
                Level.WARNING,
                f"{text}: windows follow the store's clock, so log times here will look "
                "early or late; sync this host (or the store's) with NTP",
            )
        ]
    return [Finding("clock", Level.OK, text)]


def _zone_name(zone: tzinfo | None) -> str:
    key = getattr(zone, "key", None)
    return str(key) if key else str(zone)


def _system_zone() -> str:
    if os.environ.get("TZ"):
        return os.environ["TZ"]
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        return _zone_name(datetime.now().astimezone().tzinfo)
    return target.split("zoneinfo/", 1)[-1]


def check_time_zones(context: Context) -> list[Finding]:
    """Celery's time zone against the system's and Django's: crontab entries follow Celery's."""
    if context.app is None:
        return [Finding("time zones", Level.OK, "skipped: needs -A to know Celery's time zone")]
    celery_zone = _zone_name(context.app.timezone)
    findings: list[Finding] = []
    system = _system_zone()
    if system not in {celery_zone, "UTC", "Etc/UTC"} or (
        celery_zone in {"UTC", "Etc/UTC"} and system not in {"UTC", "Etc/UTC"}
    ):
        findings.append(
            Finding(
                "time zones",
                Level.WARNING,
                f"Celery's time zone is {celery_zone} but this host's is {system}: crontab "
                f"entries fire in {celery_zone} (or their own zone), not in the host's",
            )
        )
    django_zone = _django_time_zone()
    if django_zone and django_zone != celery_zone:
        findings.append(
            Finding(
                "time zones",
                Level.WARNING,
                f"Django's TIME_ZONE is {django_zone} but Celery's timezone is {celery_zone}: "
                "set CELERY_TIMEZONE = TIME_ZONE unless you mean it",
            )
        )
    return findings or [Finding("time zones", Level.OK, f"Celery's time zone is {celery_zone}")]


def _django_time_zone() -> str | None:
    try:
        from django.conf import settings  # noqa: PLC0415 - only where Django is installed
    except ImportError:
        return None
    if not settings.configured:
        return None
    zone = getattr(settings, "TIME_ZONE", None)
    return str(zone) if zone else None


def check_backend(context: Context) -> list[Finding]:
    """The checks only the store's backend can make (a Redis eviction policy, ...)."""
    return [
        Finding(
            check.name, Level.PROBLEM if check.problem else Level.OK, check.problem or check.found
        )
        for check in context.store.checks()
    ]


#: What "sent" means on brokers that acknowledge nothing back to the publisher.
_CONFIRMS_HINT = (
    "set broker_transport_options = {'confirm_publish': True} so that a publish waits for "
    "the broker's acknowledgement"
)


def check_publisher_confirms(context: Context) -> list[Finding]:
    """An AMQP broker used without publisher confirms: a message beat records as `sent`
    was handed to the socket, and a broker crash before it was written loses it."""
    if context.app is None:
        return [Finding("publisher confirms", Level.OK, "skipped: needs -A to know the broker")]
    connection = context.app.connection_for_write()
    try:
        driver = connection.transport.driver_type
        confirms = bool(connection.transport_options.get("confirm_publish"))
        broker = redact(connection.as_uri())  # kombu masks the password itself
    finally:
        connection.release()
    if driver != "amqp":
        return [
            Finding(
                "publisher confirms",
                Level.OK,
                f"{broker}: 'sent' means the {driver} transport accepted the message",
            )
        ]
    if confirms:
        return [
            Finding(
                "publisher confirms",
                Level.OK,
                f"{broker}: publisher confirms on; 'sent' means the broker acknowledged it",
            )
        ]
    return [
        Finding(
            "publisher confirms",
            Level.WARNING,
            f"{broker}: AMQP without publisher confirms, so a message marked 'sent' can be "
            f"lost if the broker crashes before storing it; {_CONFIRMS_HINT}",
        )
    ]


def check_entries(context: Context) -> list[Finding]:
    """Entries of the app that cannot be scheduled (with -A)."""
    if not context.broken:
        return []
    return [Finding("entries", Level.PROBLEM, str(error)) for error in context.broken.values()]


def check_replicas(context: Context) -> list[Finding]:
    """Live replicas, and replicas that run different definitions of one entry."""
    store, namespace = context.store, context.config.namespace
    now = store.clock()
    alive = [r for r in store.replicas(namespace) if is_live(r.heartbeat_at, now)]
    if not alive:
        return [
            Finding(
                "replicas",
                Level.WARNING,
                f"no replica of namespace {namespace!r} heartbeated in the last "
                f"{int(ALIVE_FOR.total_seconds())} s: is beat running (with this namespace)?",
            )
        ]
    findings = [Finding("replicas", Level.OK, f"{len(alive)} replica(s) alive")]
    digests: dict[str, set[str]] = {}
    for replica in alive:
        for entry, digest in replica.definitions.items():
            digests.setdefault(entry, set()).add(digest)
    for entry, seen in sorted(digests.items()):
        if len(seen) > 1:
            findings.append(
                Finding(
                    "definitions",
                    Level.WARNING,
                    f"live replicas run {len(seen)} different definitions of entry {entry!r} "
                    "(expected during a rolling deploy; each window is still sent once)",
                )
            )
    return findings


def check_unsent_claims(context: Context) -> list[Finding]:
    """Claims older than safebeat_claim_timeout that were never confirmed as sent."""
    store, config = context.store, context.config
    now = store.clock()
    stale = [
        r
        for r in store.history(config.namespace, limit=UNSENT_SCAN)
        if r.status is Status.CLAIMED and now - r.claimed_at > 2 * config.claim_timeout
    ]
    if not stale:
        return [Finding("unsent claims", Level.OK, "no claim is left unsent")]
    oldest = min(stale, key=lambda r: r.claimed_at)
    return [
        Finding(
            "unsent claims",
            Level.PROBLEM,
            f"{len(stale)} claim(s) unsent for more than twice safebeat_claim_timeout, the "
            f"oldest {oldest.entry!r} at {oldest.window.isoformat()}: is the broker reachable "
            "from any replica, and is any replica running?",
        )
    ]
