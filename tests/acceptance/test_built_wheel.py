"""The package as released: `python -m build`, `twine check`, the wheel installed and run.

The sdist and wheel come from `python -m build` (an isolated build, as a release makes
them; wheel from the sdist), or from `$SAFEBEAT_TEST_DIST` where `make release-check`
built the files it would upload. The wheel, not this checkout, is installed in a clean
virtualenv; the demo and three real beats run on it from folders where this checkout is
not importable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from safebeat import __version__
from safebeat.stores.sqlite import SqliteStore
from tests import releases, runscope
from tests.acceptance.harness import (
    redis_messages,
    safebeat_cluster,
    safebeat_messages,
    verify,
    wait_registered,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

ROOT = releases.ROOT
SCHEDULE = {"every-1s": 1.0, "every-1s-b": 1.0, "every-2s": 2.0}
CLAIM_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the sdist and the wheel."""
    given = os.environ.get("SAFEBEAT_TEST_DIST")
    if given:
        return Path(given).resolve()
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "UV": releases.uv()},  # build's own lookup, where `import uv` fails
    )
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    [built] = dist.glob("safebeat-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a clean virtualenv with the wheel installed (and the Redis extra,
    for the Redis broker of the replica test)."""
    folder = tmp_path_factory.mktemp("wheel-venv")
    python = releases.virtualenv(folder / "venv", f"{wheel}[redis]", releases.REDIS_TRANSPORT)
    releases.assert_runs_its_own_safebeat(python, folder, __version__)
    return python


def test_the_build_makes_one_sdist_and_one_wheel_of_this_version(dist: Path) -> None:
    """`python -m build` names both files by the version in `safebeat/_version.py`."""
    names = sorted(path.name for path in dist.iterdir())
    assert names == [f"safebeat-{__version__}-py3-none-any.whl", f"safebeat-{__version__}.tar.gz"]


def test_twine_accepts_the_sdist_and_the_wheel(dist: Path) -> None:
    """`twine check --strict`: the metadata is complete and the README renders on PyPI."""
    files = sorted(str(path) for path in dist.iterdir())
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == len(files), checked.stdout


def test_the_demo_runs_on_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    """examples/demo.py, copied out of the checkout, run by the wheel's virtualenv: safebeat
    sends every window once, misses none and logs no warning."""
    examples = releases.copy_modules(
        tmp_path / "examples", ROOT / "examples" / "demo.py", ROOT / "examples" / "demo_app.py"
    )
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    demo = subprocess.run(
        [str(installed), str(examples / "demo.py"), "--seconds", "10"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output
    assert "OK: safebeat sent every window once." in output
    assert not re.search(r"safebeat sent no message|safebeat logged warnings", output), output
    shutil.rmtree(tmp_path / ".demo", ignore_errors=True)


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = runscope.unique("wheel")
    yield name
    redis.Redis.from_url(redis_url).delete(name)


@pytest.mark.redis
def test_three_replicas_of_the_installed_wheel_send_each_window_once(
    installed: Path, tmp_path: Path, redis_url: str, queue: str, namespace: str
) -> None:
    """Three `celery beat -S safebeat.Scheduler` of the wheel's virtualenv on one SQLite
    store, a Redis broker: every window once, none missing."""
    store_url = f"sqlite:///{tmp_path}/safebeat.sqlite3"
    beats = safebeat_cluster(
        tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule=SCHEDULE,
        store_url=store_url,
        namespace=namespace,
        claim_timeout=CLAIM_TIMEOUT,
    )
    beats.app, beats.python = "beatapp", str(installed)
    app = releases.copy_modules(tmp_path / "app", Path(__file__).parent / "beatapp.py")
    beats.pythonpath = str(app)
    store = SqliteStore(store_url)
    beats.start(3)
    try:
        beats.wait_started()
        wait_registered(store, namespace, SCHEDULE)
        time.sleep(8 + CLAIM_TIMEOUT + 2)
        end = store.clock()
    finally:
        beats.stop()
    verdict = verify(
        store,
        namespace,
        SCHEDULE,
        safebeat_messages(redis_messages(redis_url, queue)),
        complete_until=end - timedelta(seconds=CLAIM_TIMEOUT + 2),
    )
    verdict.assert_exactly_once(beats.logs())
    assert verdict.expected >= 12
    store.close()
