"""Bad input a user can write, fuzzed: it gets a clear error naming it and costs nothing else.

Hypothesis generates `beat_schedule` items (schedules, args, kwargs, options and the
per-entry `options["safebeat"]` policy), `safebeat_*` settings and `SAFEBEAT_*` variables,
and store URLs, mixing valid values with junk. Every invalid one must be a
`SafebeatError` subclass whose message names the entry, the setting or the URL; nothing
else may escape. `Scheduler.tick()`, fed good entries beside fuzzed ones, must keep
dispatching the good ones.

The tests at the end pin the inputs that the fuzzing once found crashing with a bare
Python exception, one test per defect, and the strategies include them.
"""

from __future__ import annotations

import importlib.resources
import string
import uuid
import zoneinfo
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from safebeat.config import SETTINGS, Config, load_config
from safebeat.entries import compile_entry, compile_schedule, describe
from safebeat.errors import ConfigError, EntryError, SafebeatError, shorten
from safebeat.store_urls import SCHEMES, backend_of, redact, scrub
from safebeat.stores import open_store
from safebeat.stores.memory import MemoryStore
from safebeat.stores.protocols import Status
from safebeat.testing import FakeClock, memory_scheduler
from safebeat.windows import SOLAR_EVENTS
from tests import services

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)
UTC = timezone.utc
CONFIG = Config(namespace="fuzz")
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def attempt(call: Callable[[], T], expected: type[E]) -> tuple[T | None, E | None]:
    """Run `call`: its result, or the `expected` error it raised; anything else propagates."""
    try:
        return call(), None
    except expected as exc:
        return None, exc


# --- strategies -------------------------------------------------------------------------------

short_text = st.text(max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(-1e6, 1e6, allow_nan=False),
    short_text,
    st.binary(max_size=4),
)
#: Dict keys, mostly text, some of types that do not sort with text.
keys = st.one_of(short_text, short_text, st.integers(-3, 3), st.none(), st.tuples(st.booleans()))
#: Any value a settings file could hold, dicts keyed by text or not.
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=6,
)
duration_text = st.from_regex(r"\A\s?\d{1,15}(\.\d{1,3})?\s?(ms|s|m|h|d)?\s?\Z")
#: Numbers of seconds: ordinary, and NaN, infinite or beyond what a timedelta holds.
seconds = st.one_of(
    st.integers(-(10**6), 10**9),
    st.floats(-1e6, 1e9, allow_nan=False),
    st.integers(),
    st.floats(),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e20, 1e300, 10**400]),
)
#: Durations, valid and not.
durations = st.one_of(
    seconds,
    duration_text,
    st.sampled_from(["99999999999d", "1e3s", "nan", "inf", "-5s"]),
    st.timedeltas(min_value=timedelta(days=-10), max_value=timedelta(days=10**5)),
    st.timedeltas(),
    junk,
)


def _zone_folders() -> set[str]:
    roots = [Path(p) for p in zoneinfo.TZPATH]
    roots.append(Path(str(importlib.resources.files("tzdata").joinpath("zoneinfo"))))
    return {
        str(path.relative_to(root))
        for root in roots
        if root.is_dir()
        for path in root.rglob("*")
        if path.is_dir()
    }


ZONE_FOLDERS = _zone_folders()
zone_names = st.one_of(
    st.sampled_from(["UTC", "Europe/Moscow", "America/New_York", "Australia/Lord_Howe"]),
    st.text(alphabet=string.ascii_letters + "/_-+.0123456789", max_size=20),
    # Folders of the zone database ("Europe"), names too long for a file, any text at all.
    st.sampled_from(sorted(ZONE_FOLDERS)),
    st.sampled_from(sorted(ZONE_FOLDERS)).map("{}/".format),
    st.text(alphabet=string.ascii_letters + "/", min_size=250, max_size=300),
    st.text(max_size=8),
    junk,
)
policy_options = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "misfire": st.one_of(st.sampled_from(["latest", "skip", "all", " ALL "]), junk),
            "grace": st.one_of(st.none(), durations),
            "catchup_limit": st.one_of(st.integers(-5, 10**6), st.integers(), junk),
            "overlap": st.one_of(st.sampled_from(["allow", "forbid"]), junk),
            "timezone": zone_names,
        },
    ),
    st.dictionaries(keys, junk, max_size=2),
    junk,
)
CRONTABS = [
    crontab(),
    crontab(minute="*/15"),
    crontab(minute=0, hour="9-17", day_of_week="mon-fri"),
    crontab(minute=30, hour=2, day_of_month="29-31", month_of_year="2"),
]
schedules = st.one_of(
    seconds,
    st.timedeltas(min_value=timedelta(days=-10), max_value=timedelta(days=10**5)),
    st.timedeltas(),
    st.sampled_from(CRONTABS),
    st.builds(
        schedule, st.timedeltas(min_value=timedelta(seconds=-5), max_value=timedelta(days=400))
    ),
    st.builds(schedule, st.timedeltas()),
    st.just(solar("sunrise", 51.5, -0.1)),
    st.builds(
        solar,
        st.sampled_from(sorted(SOLAR_EVENTS)),
        st.floats(-90, 90, allow_nan=False),
        st.floats(-180, 180, allow_nan=False),
    ),
    # A one-off (what django-celery-beat's clocked schedules become), at any time.
    st.builds(
        SimpleNamespace,
        clocked_time=st.datetimes(
            timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=14))])
        ),
    ),
    junk,
)
text_keyed = st.dictionaries(short_text, junk, max_size=3)
#: Dicts whose keys may not sort together ({1: "a", "b": 2}).
any_keyed = st.dictionaries(keys, junk, max_size=3)
raw_entries = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "task": st.one_of(st.just("proj.tasks.report"), junk),
            "schedule": schedules,
            "args": st.one_of(st.lists(junk, max_size=3), st.tuples(junk), junk),
            "kwargs": st.one_of(text_keyed, any_keyed, junk),
            "options": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {},
                    optional={
                        "queue": short_text,
                        "safebeat": policy_options,
                        "expires": junk,
                        "headers": any_keyed,
                    },
                ),
                text_keyed,
                any_keyed,
                junk,
            ),
            "relative": st.one_of(st.booleans(), st.none(), junk),
        },
    ),
    text_keyed,
    any_keyed,
    junk,
)
entry_names = st.one_of(st.text(max_size=20), st.integers(), st.none())


# --- entries ----------------------------------------------------------------------------------


@FUZZ
@given(name=entry_names, raw=raw_entries)
def test_every_entry_compiles_or_is_an_entry_error_naming_it(name: Any, raw: Any) -> None:
    """Whatever a beat_schedule item holds, it compiles, or raises EntryError naming the entry."""
    entry, error = attempt(
        lambda: compile_entry(name, raw, app_timezone=UTC, config=CONFIG), EntryError
    )
    if error is not None:
        assert isinstance(error, SafebeatError)
        assert error.entry == str(name)
        assert str(error).startswith(f"schedule entry {shorten(str(name))}: ")
        assert error.problem
    else:
        assert entry is not None
        assert entry.name == name
        assert entry.schedule_text == describe(entry.rule)
        assert len(entry.digest) == 16


@settings(FUZZ, max_examples=60)
@given(fuzzed=st.dictionaries(st.text(max_size=8).map("fuzz-{}".format), raw_entries, max_size=5))
def test_a_schedule_splits_into_good_entries_and_named_errors(fuzzed: dict[str, Any]) -> None:
    """compile_schedule keeps every good entry and reports each bad one under its own name."""
    good = {"task": "proj.tasks.report", "schedule": 60}
    entries, errors = compile_schedule({**fuzzed, "good": good}, app_timezone=UTC, config=CONFIG)
    assert "good" in entries
    assert set(entries) | set(errors) == {*fuzzed, "good"}
    assert not set(entries) & set(errors)
    for name, error in errors.items():
        assert error.entry == name


# --- settings ---------------------------------------------------------------------------------

SETTING_VALUES = {
    "safebeat_url": st.one_of(
        st.sampled_from(
            [
                "postgresql://app@db/app",
                "redis://cache/2",
                "sqlite:///beat.db",
                "mongodb://x",
                "django://",
                "django://replica",
                "django://[",
                "django://app:pw@default",
            ]
        ),
        short_text,
        junk,
    ),
    "safebeat_namespace": st.one_of(short_text, junk),
    "safebeat_misfire": st.one_of(st.sampled_from(["latest", "skip", "all"]), junk),
    "safebeat_grace": st.one_of(st.sampled_from(["", "none", "off"]), durations),
    "safebeat_catchup_limit": st.one_of(st.integers(-5, 10**6), st.integers(), junk),
    "safebeat_claim_timeout": durations,
    "safebeat_retention": durations,
    "safebeat_lock_timeout": durations,
    "safebeat_overlap_timeout": durations,
    "safebeat_metrics_port": st.one_of(
        st.integers(9100, 9102), st.integers(-5, 70000), st.integers(), st.just("off"), junk
    ),
    "safebeat_worker_metrics_port": st.one_of(st.integers(-5, 70000), st.integers(), junk),
    "safebeat_probe_port": st.one_of(st.integers(9100, 9102), st.integers(-5, 70000), junk),
    "safebeat_liveness_timeout": st.one_of(st.sampled_from(["", "none", "off"]), durations),
    "safebeat_auto_migrate": st.one_of(st.sampled_from(["yes", "no", "1", "false"]), junk),
    "safebeat_overlap": st.one_of(st.sampled_from(["allow", "forbid"]), junk),
    "safebeat_redis_eviction": st.one_of(st.sampled_from(["warn", "refuse", "ignore"]), junk),
    "safebeat_timeout": junk,  # a typo of a real setting
    "CELERY_SAFEBEAT_URL": junk,
    "broker_url": junk,
}
VARIABLES = [f"SAFEBEAT_{name.removeprefix('safebeat_').upper()}" for name in SETTINGS]
environments = st.dictionaries(
    st.sampled_from([*VARIABLES, "SAFEBEAT_CLAIM_TIMOUT", "SAFEBEAT_TEST_X", "PATH"]),
    st.one_of(
        duration_text,
        st.text(max_size=12),
        st.sampled_from(
            [
                "off",
                "none",
                "tcp://10.0.0.7:9100",
                "postgresql://db/app",
                "nan",
                "inf",
                "django://[",
            ]
        ),
    ),
    max_size=4,
)


@FUZZ
@given(conf=st.fixed_dictionaries({}, optional=SETTING_VALUES), environ=environments)
def test_settings_load_or_raise_a_config_error_naming_the_setting(
    conf: dict[str, Any], environ: dict[str, str]
) -> None:
    """Any mix of settings and variables gives a valid Config or a ConfigError naming one."""
    config, error = attempt(
        lambda: load_config(conf, app_main="fuzz", app_namespace="CELERY", environ=environ),
        ConfigError,
    )
    if error is not None:
        message = str(error).lower()
        assert any(str(key).lower() in message for key in [*conf, *environ]), str(error)
    else:
        assert config is not None
        backend_of(config.url)
        assert config.namespace
        assert config.claim_timeout > timedelta(0)
        assert config.lock_timeout > timedelta(0)
        assert config.retention > timedelta(0)
        assert config.catchup_limit >= 1
        assert config.metrics_port is None or 1 <= config.metrics_port <= 65535
        assert config.probe_port is None or config.probe_port != config.metrics_port
        assert config.liveness_timeout is None or config.liveness_timeout > timedelta(0)


# --- store URLs -------------------------------------------------------------------------------

SECRET = "pwZq81Tk"
url_strings = st.one_of(
    st.text(max_size=40),
    st.builds(
        "{}://{}".format,
        st.sampled_from([*sorted(SCHEMES), "mysql", "http", "SQLITE", "Redis"]),
        st.text(max_size=30),
    ),
)
#: URLs with a password in them, of every scheme (django:// and sqlite:// take none).
urls_with_a_password = st.builds(
    "{}://{}:{}@{}".format,
    st.sampled_from(sorted(SCHEMES)),
    st.text(string.ascii_letters, max_size=5),
    st.just(SECRET),
    st.text(max_size=20),
)


@FUZZ
@given(url=url_strings)
def test_any_store_url_opens_or_raises_a_safebeat_error_naming_it(url: str) -> None:
    """open_store takes any text: a store of the scheme's backend (not connected yet), or a
    SafebeatError about the URL (for django://, which picks its implementation by the
    alias's database when opened, about the Django settings of the alias it names)."""
    redact(url)
    store, error = attempt(lambda: open_store(url), SafebeatError)
    if error is not None:
        text = str(error).lower()
        assert "url" in text or (backend_of(url) == "django" and text.startswith("django://"))
    else:
        assert backend_of(url) in type(store).__name__.lower()


@FUZZ
@given(url=urls_with_a_password)
def test_a_store_url_never_shows_its_password(url: str) -> None:
    """The password of a URL appears neither in its redacted form, nor the store's, nor errors."""
    assert SECRET not in redact(url)
    store, error = attempt(lambda: open_store(url), SafebeatError)
    shown = str(error) if store is None else store.display_url
    assert SECRET not in shown


CLOSED_PORT = services.free_port()  # nothing listens here: connecting is refused at once
QUERY_OPTIONS = {
    "postgres": ["sslmode", "application_name", "target_session_attrs", "bogus"],
    "redis": [
        "db",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_read_size",
        "health_check_interval",
        "protocol",
        "client_name",
        "ssl_cert_reqs",
        "ssl_min_version",
        "ssl_keyfile",
        # Options redis-py does not know (libpq's), or wants a Python object for.
        "sslmode",
        "timeout",
        "retry",
        "retry_on_error",
        "bogus",
    ],
}


@st.composite
def loopback_urls(draw: st.DrawFn) -> str:
    """Store URLs for loopback only, with ports, users, paths and options good and bad."""
    scheme = draw(
        st.sampled_from(
            ["postgresql", "postgres", "redis", "rediss", "redis+sentinel", "redis+cluster"]
        )
    )
    host = draw(st.sampled_from(["127.0.0.1", "localhost", "[::1]"]))
    ports = [":70000", ":-1", ":abc", ":²"]
    # Each of these waits for a timeout (a TLS handshake with the plain Redis on the default
    # port, Sentinel's retries): slow, and right, so only a few of them.
    if scheme != "redis+sentinel":
        ports.append(f":{CLOSED_PORT}")
    if scheme != "rediss" and "+" not in scheme:
        ports += [":0", ":"]
    user = draw(st.sampled_from(["", "app@", f"app:{SECRET}@", f":{SECRET}@"]))
    path = draw(st.text(alphabet=string.ascii_letters + string.digits + "-_/.%", max_size=8))
    url = f"{scheme}://{user}{host}{draw(st.sampled_from(ports))}/{path}"
    if draw(st.booleans()):
        key = draw(st.sampled_from(QUERY_OPTIONS[backend_of(url)]))
        url += f"?{key}={draw(st.text(string.ascii_letters + string.digits + '-.', max_size=6))}"
    return url


@settings(FUZZ, max_examples=80)
@given(url=loopback_urls())
def test_a_store_url_that_cannot_work_fails_on_first_use_with_a_store_error(url: str) -> None:
    """On first use, a URL nothing answers at is a SafebeatError naming the store, no password."""

    def first_use() -> datetime:
        store = open_store(url)
        try:
            return store.clock()
        finally:
            store.close()

    now, error = attempt(first_use, SafebeatError)
    if error is not None:
        assert SECRET not in str(error)
    else:  # something listens there (the default port of a running server)
        assert now is not None
        assert now.tzinfo is not None


@pytest.fixture(scope="module")
def sqlite_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for SQLite files, with a subfolder whose name has a space."""
    folder = tmp_path_factory.mktemp("fuzz-sqlite")
    (folder / "a b").mkdir()
    return folder


@settings(FUZZ, max_examples=60)
@given(
    folder=st.sampled_from(["", "missing/", "a b/"]),
    # Any text but a folder separator: NUL bytes and lone surrogates too.
    name=st.text(st.characters(blacklist_characters="/"), max_size=16),
)
def test_a_sqlite_path_works_or_is_a_store_error_naming_the_file(
    sqlite_folder: Path, folder: str, name: str
) -> None:
    """Any file name under a folder gives a working SQLite store or a SafebeatError naming it."""
    url = f"sqlite:///{sqlite_folder}/{folder}{name}"

    def first_use() -> datetime:
        store = open_store(url)
        try:
            store.migrate()
            return store.clock()
        finally:
            store.close()

    now, error = attempt(first_use, SafebeatError)
    if error is not None:
        assert "sqlite" in str(error).lower()
    else:
        assert now is not None
        assert now.tzinfo is not None


# --- the beat loop ----------------------------------------------------------------------------


@settings(FUZZ, max_examples=30)
@given(fuzzed=st.dictionaries(st.text(max_size=8).map("fuzz-{}".format), raw_entries, max_size=4))
def test_beat_dispatches_the_good_entries_whatever_else_the_schedule_holds(
    fuzzed: dict[str, Any],
) -> None:
    """Scheduler.tick() on a schedule of good and fuzzed entries never raises; the good ones run."""
    namespace = f"fuzz-{uuid.uuid4().hex[:8]}"
    app = Celery("fuzz", broker="memory://", set_as_current=False)
    app.conf.update(
        task_default_queue=namespace,
        result_expires=None,
        safebeat_url="memory://fuzz-unused",
        safebeat_namespace=namespace,
        beat_schedule={
            **fuzzed,
            "good-every-10s": {"task": "proj.tasks.report", "schedule": 10},
            "good-crontab": {"task": "proj.tasks.report", "schedule": crontab()},
        },
    )
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC))
    store = MemoryStore(clock=clock.now)
    scheduler = memory_scheduler(app, clock, store=store)
    try:
        for _ in range(13):
            delay = scheduler.tick()
            assert 0 <= delay <= scheduler.max_interval
            clock.advance(10)
    finally:
        scheduler.close()
    assert set(scheduler.entries) | set(scheduler.broken_entries) >= set(fuzzed)
    sent = {
        name: sum(r.status is Status.SENT for r in store.history(namespace, name, limit=100))
        for name in ("good-every-10s", "good-crontab")
    }
    assert sent["good-every-10s"] >= 11, sent
    assert sent["good-crontab"] >= 1, sent


# --- defects the fuzzing found, each pinned by the input that showed it ------------------------


def compile_one(raw: Any) -> Any:
    return compile_entry("e", raw, app_timezone=UTC, config=CONFIG)


@pytest.mark.parametrize("zone", ["Europe", "America/Argentina", "Z" * 300])
def test_a_time_zone_that_is_a_folder_or_too_long_is_an_entry_error(zone: str) -> None:
    """`timezone: "Europe"` (a folder of the zone database) is an EntryError naming it."""
    with pytest.raises(EntryError, match="time zone") as caught:
        compile_one({"task": "t", "schedule": 60, "options": {"safebeat": {"timezone": zone}}})
    assert repr(zone) in str(caught.value)


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), float("-inf"), 1e20])
def test_a_schedule_of_nan_infinite_or_huge_seconds_is_an_entry_error(seconds: float) -> None:
    """`schedule: float("nan")` is an EntryError naming the entry, not a ValueError."""
    with pytest.raises(EntryError, match=r"^schedule entry 'e': schedule "):
        compile_one({"task": "t", "schedule": seconds})


@pytest.mark.parametrize("grace", [float("nan"), float("inf"), "99999999999d"])
def test_a_grace_of_nan_infinite_or_huge_is_an_entry_error(grace: object) -> None:
    """`grace: float("inf")` is an EntryError, not an OverflowError."""
    with pytest.raises(EntryError, match="grace"):
        compile_one({"task": "t", "schedule": 60, "options": {"safebeat": {"grace": grace}}})


@pytest.mark.parametrize("options", [["queue", "reports"], "reports", 5])
def test_options_that_are_not_a_dict_are_an_entry_error(options: object) -> None:
    """`options: "reports"` is an EntryError naming the entry, not a ValueError."""
    with pytest.raises(EntryError, match="options"):
        compile_one({"task": "t", "schedule": 60, "options": options})


def test_kwargs_with_keys_of_mixed_types_compile_unchanged() -> None:
    """`kwargs: {1: "a", "b": 2}` compiles (no TypeError from sorting its keys) and the
    entry keeps the kwargs as given; the same keys in options are an EntryError (below)."""
    entry = compile_one({"task": "t", "schedule": 60, "kwargs": {1: "a", "b": 2}})
    assert entry.kwargs == {1: "a", "b": 2}


def test_kwargs_with_keys_of_mixed_types_compile_to_a_stable_digest() -> None:
    """Celery sends such kwargs (JSON makes the keys text), so they compile; their digest is
    the same whatever the keys' order, and differs from that of text keys alike."""
    mixed = compile_one({"task": "t", "schedule": 60, "kwargs": {1: "a", "b": {2: 3, "c": 4}}})
    again = compile_one({"task": "t", "schedule": 60, "kwargs": {"b": {"c": 4, 2: 3}, 1: "a"}})
    text = compile_one({"task": "t", "schedule": 60, "kwargs": {"1": "a", "b": {"2": 3, "c": 4}}})
    assert mixed.digest == again.digest
    assert mixed.digest != text.digest


@pytest.mark.parametrize("options", [{1: "a", "b": 2}, {1: "a"}, {(1,): "a"}])
def test_options_keys_that_are_not_text_are_an_entry_error(options: dict[Any, Any]) -> None:
    """Options are apply_async's keyword arguments: a key that is not text is an EntryError
    naming 'options' (stock beat would fail on every send)."""
    with pytest.raises(EntryError, match="'options' keys"):
        compile_one({"task": "t", "schedule": 60, "options": options})


@pytest.mark.parametrize(
    "bad",
    [
        {"task": "t", "schedule": 60, "options": {"safebeat": {"timezone": "Europe"}}},
        {"task": "t", "schedule": float("nan")},
        {"task": "t", "schedule": 60, "options": "reports"},
    ],
)
def test_one_entry_that_crashes_compilation_leaves_the_others_running(bad: dict[str, Any]) -> None:
    """A Scheduler whose schedule holds such an entry starts, reports it and runs the rest."""
    app = Celery("fuzz", broker="memory://", set_as_current=False)
    app.conf.update(
        result_expires=None,
        safebeat_url="memory://fuzz-unused",
        beat_schedule={"bad": bad, "good": {"task": "t", "schedule": 10}},
    )
    scheduler = memory_scheduler(app, FakeClock())
    assert set(scheduler.broken_entries) == {"bad"}
    assert "good" in scheduler.entries


@pytest.mark.parametrize(
    ("conf", "environ"),
    [
        ({"safebeat_claim_timeout": float("nan")}, {}),
        ({"safebeat_retention": float("inf")}, {}),
        ({"safebeat_lock_timeout": 1e300}, {}),
        ({}, {"SAFEBEAT_CLAIM_TIMEOUT": "99999999999999d"}),
    ],
)
def test_durations_beyond_a_timedelta_are_a_config_error(
    conf: dict[str, Any], environ: dict[str, str]
) -> None:
    """`SAFEBEAT_CLAIM_TIMEOUT=99999999999999d` is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=r"(?i)claim_timeout|retention|lock_timeout"):
        load_config(conf, environ=environ)


@pytest.mark.parametrize("url", ["django://[", "django://]"])
def test_a_django_url_that_cannot_be_read_is_a_config_error(url: str) -> None:
    """`django://[` is a ConfigError naming the URL, not urlsplit's ValueError."""
    with pytest.raises(ConfigError, match="django"):
        open_store(url)


def test_a_sqlite_path_with_a_nul_byte_is_a_store_error(tmp_path: Path) -> None:
    """`sqlite:////tmp/a\x00b` is a SafebeatError naming the file, not a ValueError."""
    store = open_store(f"sqlite:///{tmp_path}/a\x00b")
    with pytest.raises(SafebeatError, match="SQLite"):
        store.migrate()


@pytest.mark.parametrize("url", [f"django://user:{SECRET}@default", f"sqlite://user:{SECRET}@x"])
def test_a_url_of_a_backend_without_passwords_does_not_show_one(url: str) -> None:
    """`django://user:secret@default` is refused, or shown without its password."""
    store, error = attempt(lambda: open_store(url), SafebeatError)
    shown = str(error) if store is None else store.display_url
    assert SECRET not in shown


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?sslmode=require",
        "redis+sentinel://[::1]:abc/mymaster",
        "redis+cluster://[::1]:abc",
    ],
)
def test_a_redis_url_redis_py_cannot_read_is_a_store_error(url: str) -> None:
    """An unknown query option or a bad IPv6 port is a StoreError naming the URL."""
    store = open_store(url)
    with pytest.raises(SafebeatError, match=r"safebeat_url|Redis store"):
        store.clock()


# --- more defects, found by longer fuzzing runs and by reading the fixes above -----------------


@pytest.mark.parametrize(
    ("raw", "digest"),
    [
        ({"task": "proj.tasks.report", "schedule": 60}, "b7ab06481acc5696"),
        (
            {
                "task": "proj.tasks.report",
                "schedule": crontab(minute="*/15"),
                "args": [1, "a"],
                "kwargs": {"b": 2, "a": {10: "x", 9: "y"}},
            },
            "6749366b801918fe",
        ),
        (
            {
                "task": "t",
                "schedule": timedelta(hours=1),
                "options": {
                    "queue": "q",
                    "expires": 30,
                    "headers": {"x": 1},
                    "safebeat": {"misfire": "skip", "grace": 300, "timezone": "Europe/Moscow"},
                },
            },
            "d26064ca227b391a",
        ),
        (
            {
                "task": "t",
                "schedule": schedule(timedelta(seconds=5)),
                "relative": True,
                "kwargs": {"n": None, "f": 1.5, "l": [1, (2, 3)], "s": {1, 2}},
            },
            "f617dfd1915a3d8a",
        ),
        (
            {"task": "t", "schedule": 10, "options": {"safebeat": {"overlap": "forbid"}}},
            "8c8547da4ab96f91",
        ),
    ],
)
def test_the_digests_of_ordinary_entries_did_not_change(raw: dict[str, Any], digest: str) -> None:
    """Digests are stored: the robust digest of odd keys leaves every earlier one as it was
    (these were computed before it)."""
    assert compile_one(raw).digest == digest


@pytest.mark.parametrize("relative", ["no", "yes", "false", 0, 1, [], {}])
def test_relative_that_is_not_a_bool_is_an_entry_error(relative: object) -> None:
    """`relative: "no"` is an EntryError naming 'relative', not a truthy string that means yes."""
    with pytest.raises(EntryError, match="'relative' must be True or False"):
        compile_one({"task": "t", "schedule": 60, "relative": relative})


@pytest.mark.parametrize(("relative", "anchored"), [(True, True), (False, False), (None, False)])
def test_relative_true_false_or_unset_compiles(relative: object, anchored: bool) -> None:
    """`relative` True anchors at the epoch; False, or None as if unset, does not."""
    entry = compile_one({"task": "t", "schedule": 60, "relative": relative})
    assert (entry.rule.anchor is not None) is anchored


class _Exploding:
    """A schedule object whose `clocked_time` raises: the kind of surprise nobody checks for."""

    @property
    def clocked_time(self) -> datetime:
        raise RuntimeError("clock\nbroken")


def test_compile_schedule_turns_any_surprise_into_an_entry_error_naming_the_entry() -> None:
    """An exception compile_entry did not foresee is that entry's EntryError, on one line,
    with the original type and message; the other entries compile."""
    entries, errors = compile_schedule(
        {"odd": {"task": "t", "schedule": _Exploding()}, "good": {"task": "t", "schedule": 10}},
        app_timezone=UTC,
        config=CONFIG,
    )
    assert set(entries) == {"good"}
    assert str(errors["odd"]) == (
        "schedule entry 'odd': cannot be compiled (RuntimeError: clock broken); "
        "fix or remove the entry"
    )


@pytest.mark.parametrize(
    ("clocked", "zone"),
    [
        (datetime(1, 1, 1), "Asia/Tokyo"),  # naive: in the entry's zone, before year 1 in UTC
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), "UTC"),
        (datetime(9999, 12, 31, 23), "America/New_York"),
    ],
)
def test_a_clocked_time_without_a_utc_instant_is_an_entry_error(
    clocked: datetime, zone: str
) -> None:
    """A one-off on 0001-01-01 in Tokyo (before year 1 in UTC) is an EntryError, not an
    OverflowError."""
    with pytest.raises(EntryError, match="clocked time"):
        compile_entry(
            "e",
            {"task": "t", "schedule": SimpleNamespace(clocked_time=clocked)},
            app_timezone=zoneinfo.ZoneInfo(zone),
            config=CONFIG,
        )


HUGE = 10**5000  # more digits than Python turns into text


@pytest.mark.parametrize(
    "raw",
    [
        {"task": "t", "schedule": HUGE},
        {"task": HUGE, "schedule": 60},
        {"task": "t", "schedule": 60, "args": [HUGE]},
        {"task": "t", "schedule": 60, "options": {"safebeat": {"catchup_limit": HUGE}}},
        {"task": "t", "schedule": 60, "options": {"safebeat": {"grace": HUGE}}},
        {"task": "t", "schedule": 60, "options": {"safebeat": {"timezone": HUGE}}},
    ],
)
def test_an_int_too_long_to_print_is_an_entry_error(raw: dict[str, Any]) -> None:
    """A 5000-digit int anywhere in an entry is an EntryError, not the ValueError its repr
    raises."""
    with pytest.raises(EntryError):
        compile_one(raw)


@pytest.mark.parametrize(
    "setting",
    [
        "safebeat_catchup_limit",
        "safebeat_claim_timeout",
        "safebeat_metrics_port",
        "safebeat_auto_migrate",
        "safebeat_misfire",
        "safebeat_redis_eviction",
        "safebeat_namespace",
    ],
)
def test_a_setting_of_an_int_too_long_to_print_is_a_config_error(setting: str) -> None:
    """`safebeat_catchup_limit = 10**5000` is a ConfigError naming the setting."""
    with pytest.raises(ConfigError, match=setting):
        load_config({setting: HUGE})


@pytest.mark.parametrize(
    ("conf", "environ", "name"),
    [
        ({"CELERY_SAFEBEAT_URL": "0"}, {}, "CELERY_SAFEBEAT_URL"),
        ({}, {"SAFEBEAT_URL": "mysql://db/app"}, "SAFEBEAT_URL"),
        ({"CELERY_SAFEBEAT_URL": f"django://app:{SECRET}@default"}, {}, "CELERY_SAFEBEAT_URL"),
        ({}, {"SAFEBEAT_URL": "django://["}, "SAFEBEAT_URL"),
    ],
)
def test_a_bad_url_setting_is_named_by_the_key_it_came_from(
    conf: dict[str, Any], environ: dict[str, str], name: str
) -> None:
    """A bad URL in CELERY_SAFEBEAT_URL or $SAFEBEAT_URL is a ConfigError that says so (not
    `safebeat_url`), without the password."""
    with pytest.raises(ConfigError, match=f"^{name} ") as caught:
        load_config(conf, app_namespace="CELERY", environ=environ)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"django://app:{SECRET}@[", "django://***@["),
        (f"postgresql://app:{SECRET}@db]/x?password=x", "postgresql://***@db]/x?password=***"),
        (f"redis://:{SECRET}@[::1", "redis://***@[::1"),
    ],
)
def test_a_url_urlsplit_rejects_is_redacted_and_scrubbed_all_the_same(url: str, shown: str) -> None:
    """A URL its driver cannot read (an unbalanced bracket) shows what follows its last `@`,
    the password hidden, and a driver's message about it is not shown at all."""
    assert redact(url) == shown
    assert SECRET not in scrub(f"password {SECRET} rejected", url)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://127.0.0.1:1/%80",
        "postgresql://%ff@127.0.0.1:1/x",
        f"postgresql://app:{SECRET}%ff@127.0.0.1:1/x",
        "postgresql://127.0.0.1:1/x?application_name=%c3",
        "postgresql://127.0.0.1:1/\ud800",
    ],
)
def test_a_postgres_url_that_is_not_utf8_is_a_config_error(url: str) -> None:
    """psycopg decodes every part of a URL as UTF-8: `%ff` is a ConfigError naming the URL,
    not psycopg's UnicodeDecodeError on first use."""
    with pytest.raises(ConfigError, match="UTF-8") as caught:
        open_store(url)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        f"redis://:{SECRET}@127.0.0.1:1/0?retry=3",
        "redis://127.0.0.1:1/0?retry_on_error=x",
        "redis://127.0.0.1:1/0?timeout=5",
        "redis://127.0.0.1:1/0?ssl_certfile=/x.pem",
        "redis://127.0.0.1:1/0?socket_timeout=nan",
        "redis://127.0.0.1:1/0?socket_connect_timeout=-1",
        "redis://127.0.0.1:1/0?socket_read_size=-1",
        "redis://127.0.0.1:1/0?protocol=7",
        "rediss://127.0.0.1:1/0?ssl_min_version=99",
        "rediss://127.0.0.1:1/0?ssl_keyfile=/x.key",
        "rediss://127.0.0.1:1/0?ssl_cert_reqs=bogus",
        "redis+sentinel://127.0.0.1:²/mymaster",
        "redis+sentinel://127.0.0.1:26379/mymaster/²",
        f"redis+cluster://127.0.0.1:{'9' * 5000}",
        f"redis+sentinel://:{SECRET}@[::1/mymaster",
    ],
)
def test_a_redis_url_option_that_would_fail_on_first_use_is_a_store_error(url: str) -> None:
    """Options redis-py would pass on as text and then trip over (or a socket would refuse)
    are a StoreError naming the URL on first use, without the password; nothing connects."""
    store = open_store(url)
    with pytest.raises(SafebeatError, match=r"safebeat_url|Redis store") as caught:
        store.clock()
    assert SECRET not in str(caught.value)
