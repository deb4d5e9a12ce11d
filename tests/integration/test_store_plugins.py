"""Stores from other distributions, through the `safebeat.stores` entry point group.

The example plugin (`examples/store_plugin`) is installed for real, with pip, into a
folder put on the path; the hostile plugins are distributions written as an installer
leaves them (a `.dist-info` folder beside their module), found by `importlib.metadata`
as any installed package is. Nothing is patched inside safebeat.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from safebeat.cli import main
from safebeat.errors import ConfigError
from safebeat.identity import Replica
from safebeat.records import Definition, Status
from safebeat.store_urls import plugin_schemes, redact
from safebeat.stores import open_store
from safebeat.stores.sqlite import SqliteStore
from tests.acceptance.harness import ROOT

EXAMPLE = ROOT / "examples" / "store_plugin"
SECRET = "Qx7plugin-secret"
#: A module whose store class is the SQLite store, opened from any scheme's URL.
WRAPPING_SQLITE = """
from safebeat.stores.sqlite import SqliteStore

class Store(SqliteStore):
    def __init__(self, url, *, lock_timeout):
        super().__init__("sqlite://" + url.partition("://")[2].rpartition("@")[2])
"""


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`examples/store_plugin` installed with pip (no index, no dependencies) into a
    folder of its own, as `pip install` puts it in a site-packages."""
    target = tmp_path_factory.mktemp("example-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--target", str(target), str(EXAMPLE)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    return target


@pytest.fixture(autouse=True)
def fresh_plugin_schemes() -> Iterator[None]:
    """Each test reads the entry points on its own path; later tests read theirs."""
    plugin_schemes.cache_clear()
    yield
    plugin_schemes.cache_clear()


@pytest.fixture
def installed(example_site: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Install the example, and return how to install a distribution written on the spot:
    `install(name, {scheme: "module:attribute"}, {module: source})`."""
    monkeypatch.syspath_prepend(str(example_site))
    site = example_site.parent / f"site-{time.monotonic_ns()}"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def install(
        name: str, entry_points: dict[str, str], modules: dict[str, str] | None = None
    ) -> Path:
        info = site / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        lines = [f"{scheme} = {target}" for scheme, target in entry_points.items()]
        (info / "entry_points.txt").write_text("[safebeat.stores]\n" + "\n".join(lines) + "\n")
        for module, source in (modules or {}).items():
            (site / f"{module}.py").write_text(source)
        plugin_schemes.cache_clear()
        return site

    return install


def unique(prefix: str) -> str:
    """A module name no earlier test imported."""
    return f"{prefix}_{time.monotonic_ns()}"


def test_a_plugin_scheme_opens_the_plugins_store_and_hides_its_password(
    installed: Callable[..., Path], tmp_path: Path
) -> None:
    """`examplesqlite://` opens the example's store, in any case of its scheme, and its
    display URL shows the user but not the password."""
    url = f"examplesqlite://beat:{SECRET}@/{tmp_path}/store.sqlite3"
    store = open_store(url)
    assert type(store).__name__ == "ExampleStore"
    assert isinstance(store, SqliteStore)
    assert store.display_url == f"examplesqlite://beat:***@/{tmp_path}/store.sqlite3"
    assert store.migrate() >= 1
    again = open_store(url.replace("examplesqlite", "ExampleSQLite", 1))
    assert type(again).__name__ == "ExampleStore"
    assert again.schema_version() == store.schema_version()


def test_an_unknown_scheme_lists_the_plugin_schemes_too(installed: Callable[..., Path]) -> None:
    """The error for an unknown scheme names every scheme that would open, the plugins'
    among the built-in ones."""
    with pytest.raises(ConfigError) as raised:
        open_store(f"nosuch://u:{SECRET}@host/x")
    message = str(raised.value)
    assert "unknown scheme 'nosuch'" in message
    assert "examplesqlite://" in message
    assert "postgresql://" in message
    assert SECRET not in message


def test_a_plugin_claiming_a_built_in_scheme_is_refused_naming_both_distributions(
    installed: Callable[..., Path], sqlite_url: str
) -> None:
    """A distribution naming `postgresql` (or `SQLite`) in the group does not replace the
    built-in store: opening that scheme fails, naming the plugin's entry point and
    distribution and safebeat's own; nothing of the plugin is imported, and the other
    schemes open as before."""
    module = unique("shadowing")
    installed(
        "shadow-stores",
        {"postgresql": f"{module}:Store", "SQLite": f"{module}:Store"},
        {module: "raise RuntimeError('imported')"},
    )
    for url in (f"postgresql://app:{SECRET}@127.0.0.1/db", sqlite_url):
        with pytest.raises(ConfigError) as raised:
            open_store(url)
        message = str(raised.value)
        assert "shadow-stores 1.0" in message
        assert "built-in scheme" in message
        assert "distribution safebeat" in message
        assert SECRET not in message
    assert module not in sys.modules
    assert open_store("memory://plugins").clock()


def test_a_plugin_that_fails_to_import_is_named_with_its_distribution(
    installed: Callable[..., Path],
) -> None:
    """An entry point whose module raises when imported: the error names the scheme, the
    entry point and its distribution, and the plugin's own message."""
    module = unique("broken")
    installed("broken-store", {"brokenstore": f"{module}:Store"}, {module: "import nosuchthing"})
    with pytest.raises(ConfigError) as raised:
        open_store(f"brokenstore://u:{SECRET}@host/x")
    message = str(raised.value)
    assert f"brokenstore = {module}:Store" in message
    assert "broken-store 1.0" in message
    assert "cannot be imported: ModuleNotFoundError" in message
    assert "nosuchthing" in message
    assert "brokenstore://u:***@host/x" in message
    assert SECRET not in message


def test_two_plugins_for_one_scheme_are_refused_naming_both(
    installed: Callable[..., Path],
) -> None:
    """Two distributions claiming one scheme (whatever its case): neither is chosen, and
    the error names both, with what each would load."""
    first, second = unique("first"), unique("second")
    installed("first-store", {"twice": f"{first}:Store"}, {first: WRAPPING_SQLITE})
    installed("second-store", {"TWICE": f"{second}:Store"}, {second: WRAPPING_SQLITE})
    with pytest.raises(ConfigError) as raised:
        open_store("twice:///x.sqlite3")
    message = str(raised.value)
    assert "2 entry points" in message
    assert f"twice = {first}:Store (first-store 1.0)" in message
    assert f"TWICE = {second}:Store (second-store 1.0)" in message


def test_a_plugin_scheme_with_upper_case_letters_matches_urls_in_any_case(
    installed: Callable[..., Path], tmp_path: Path
) -> None:
    """An entry point named `MyStore+v2` serves `mystore+v2://`, `MYSTORE+V2://`, ...;
    one named `my_store` (no URL scheme has `_`) is refused, saying why."""
    module = unique("cased")
    installed(
        "cased-store",
        {"MyStore+v2": f"{module}:Store", "my_store": f"{module}:Store"},
        {module: WRAPPING_SQLITE},
    )
    for scheme in ("mystore+v2", "MYSTORE+V2", "MyStore+v2"):
        store = open_store(f"{scheme}:///{tmp_path}/cased.sqlite3")
        assert type(store).__name__ == "Store"
    with pytest.raises(ConfigError, match="which is no URL scheme"):
        open_store(f"my_store:///{tmp_path}/cased.sqlite3")


def test_a_plugin_returning_an_incomplete_store_is_told_what_it_lacks(
    installed: Callable[..., Path],
) -> None:
    """An opener returning something that is no `Store` is refused when opened, naming
    the methods it lacks; one raising is named with its distribution; and a password
    a plugin's own ConfigError quotes is hidden."""
    module = unique("incomplete")
    source = (
        "class Half:\n"
        "    display_url = 'half://'\n"
        "    def clock(self): ...\n"
        "def half(url, *, lock_timeout):\n"
        "    return Half()\n"
        "def failing(url, *, lock_timeout):\n"
        "    raise ValueError('no server at ' + url)\n"
        "def refusing(url, *, lock_timeout):\n"
        "    from safebeat.errors import ConfigError\n"
        "    raise ConfigError('cannot read ' + url)\n"
    )
    installed(
        "half-store",
        {
            "half": f"{module}:half",
            "failing": f"{module}:failing",
            "refusing": f"{module}:refusing",
        },
        {module: source},
    )
    with pytest.raises(ConfigError) as raised:
        open_store("half://")
    assert "returned a Half, which lacks" in str(raised.value)
    assert "tick" in str(raised.value)
    assert "half-store 1.0" in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        open_store(f"failing://u:{SECRET}@host")
    assert "failed to open the store: ValueError: no server at failing://u:***@host" in str(
        raised.value
    )
    assert SECRET not in str(raised.value)
    with pytest.raises(ConfigError, match=r"^cannot read refusing://u:\*\*\*@host$"):
        open_store(f"refusing://u:{SECRET}@host")


def test_migrate_status_and_doctor_work_on_a_plugin_url_and_hide_its_password(
    installed: Callable[..., Path], tmp_path: Path, namespace: str
) -> None:
    """The CLI opens a plugin's URL as any other: `migrate`, `status` and `doctor` run and
    never show its password."""
    url = f"examplesqlite://beat:{SECRET}@/{tmp_path}/cli.sqlite3"
    store = open_store(url)
    store.migrate()
    store.register(namespace, [Definition("ping", "every 1s", "d1")], Replica("h", 1, "x"))
    for command in ("migrate", "status", "doctor"):
        result = CliRunner().invoke(main, ["--url", url, "--namespace", namespace, command])
        assert SECRET not in result.output, command
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            command,
            result.output,
        )
    result = CliRunner().invoke(main, ["--url", url, "--namespace", namespace, "status"])
    assert result.exit_code == 0, result.output
    assert "examplesqlite://beat:***@" in result.output
    assert "ping" in result.output
    doctor = CliRunner().invoke(main, ["--url", url, "--namespace", namespace, "doctor"])
    served = (
        "served by the store plugin examplesqlite = safebeat_example_store:ExampleStore "
        "(safebeat-example-store 0.1.0)"
    )
    assert served in doctor.output, doctor.output
    assert "answers, schema version" in doctor.output, doctor.output


@pytest.mark.redis
def test_a_real_celery_beat_dispatches_each_window_once_through_the_plugin(
    example_site: Path, tmp_path: Path, namespace: str, redis_url: str
) -> None:
    """`celery beat -S safebeat.Scheduler` with `SAFEBEAT_URL=examplesqlite://...`, in a
    process that finds the example installed: every window of a 1 s entry is claimed and
    sent once through the plugin's store, and the banner shows its URL without the
    password."""
    url = f"examplesqlite://beat:{SECRET}@/{tmp_path}/beat.sqlite3"
    queue = f"plugin-{namespace}"
    assert open_store_with(example_site, url).migrate() >= 1
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(example_site), str(ROOT)]),
        "SB_BROKER_URL": redis_url,
        "SB_QUEUE": queue,
        "SB_SCHEDULE": json.dumps({"ping": 1}),
        "SAFEBEAT_URL": url,
        "SAFEBEAT_NAMESPACE": namespace,
    }
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tests.acceptance.beatapp", "beat",
         "-S", "safebeat.Scheduler", "--loglevel", "INFO",
         "--schedule", str(tmp_path / "celerybeat-schedule")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        time.sleep(7)
    finally:
        beat.send_signal(signal.SIGTERM)
        output, _ = beat.communicate(timeout=30)
    client = redis.Redis.from_url(redis_url)
    try:
        sent = [json.loads(raw)["headers"] for raw in client.lrange(queue, 0, -1)]
    finally:
        client.delete(queue)
    assert SECRET not in output
    assert "examplesqlite://beat:***@" in output, output
    rows = open_store_with(example_site, url).history(namespace, "ping", limit=1000)
    assert len(rows) >= 3, output
    assert all(row.status is Status.SENT for row in rows), rows
    windows = [h["safebeat_window"] for h in sent]
    assert len(windows) == len(set(windows)) == len(rows), output


def open_store_with(site: Path, url: str) -> SqliteStore:
    """Open `url` in this process with the example installed in `site`."""
    sys.path.insert(0, str(site))
    plugin_schemes.cache_clear()
    try:
        store = open_store(url)
    finally:
        sys.path.remove(str(site))
    assert isinstance(store, SqliteStore)
    return store


def test_the_contract_suite_passes_against_the_example_plugin(example_site: Path) -> None:
    """The example's own test module, as its author runs it (pytest, the package
    installed): every case of `safebeat.testing.stores.StoreContract` passes."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-c", str(EXAMPLE / "pyproject.toml"), "--rootdir", str(EXAMPLE),
         str(EXAMPLE / "test_example_store.py")],
        env={**os.environ, "PYTHONPATH": str(example_site)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary
    assert "failed" not in summary


def test_redacting_a_plugin_url_needs_no_plugin() -> None:
    """A plugin's URL is shown as urllib reads it, with the password hidden, even where
    the plugin is not installed (a banner of an error about it)."""
    assert redact(f"vault+kv://app:{SECRET}@host:1/x?password={SECRET}") == (
        "vault+kv://app:***@host:1/x?password=***"
    )
