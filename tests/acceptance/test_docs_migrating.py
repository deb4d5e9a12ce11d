"""docs/migrating-from-django-celery-beat.md, followed as written on a small Django project.

The project is one a reader could have before the page: Django on SQLite, Celery with a
Redis broker, django-celery-beat with one `PeriodicTask` row. The test then does what the
page says, with the page's own blocks (`tests/docpages.py`), and checks that three beats
and a worker run every window once, with the outcome the worker hook records.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
import textwrap
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests import services
from tests.acceptance.docrun import (
    DOCS,
    Reader,
    add_settings,
    make_virtualenv,
    only_command,
    tail,
    wait_for,
)
from tests.docpages import Page

pytestmark = [pytest.mark.acceptance, pytest.mark.redis, pytest.mark.xdist_group("docs")]

PAGE = Page(DOCS / "migrating-from-django-celery-beat.md")

#: What the project had installed before the page: Django, django-celery-beat, Celery
#: with its broker's client.
REQUIREMENTS = ("django>=5.2", "django-celery-beat>=2.8", "celery[redis]")

REPLICAS = 3
WINDOWS = 3
ENTRY = "record-every-5s"


def project_files(broker_url: str, traces: Path) -> dict[str, str]:
    """The Django project before the page: a settings module, the Celery app, one task."""
    settings = f"""\
        SECRET_KEY = "not-a-secret"
        USE_TZ = True
        TIME_ZONE = "UTC"
        INSTALLED_APPS = [
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_celery_beat",
            "shop",
        ]
        DATABASES = {{
            "default": {{
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": "db.sqlite3",
                "OPTIONS": {{"init_command": "PRAGMA journal_mode=WAL;"}},
            }}
        }}
        DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
        CELERY_BROKER_URL = {broker_url!r}
        CELERY_TIMEZONE = "UTC"
        SHOP_TRACES = {str(traces)!r}
    """
    celery = """\
        import os

        from celery import Celery

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
        app = Celery("proj")
        app.config_from_object("django.conf:settings", namespace="CELERY")
        app.autodiscover_tasks()
    """
    tasks = """\
        import json
        import uuid
        from pathlib import Path

        from celery import shared_task
        from django.conf import settings


        @shared_task(bind=True)
        def record(self):
            trace = Path(settings.SHOP_TRACES) / f"{uuid.uuid4().hex}.json"
            trace.write_text(json.dumps({"task_id": self.request.id}))
    """
    manage = """\
        import os
        import sys

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    """
    return {
        "manage.py": manage,
        "proj/__init__.py": "from .celery import app as celery_app\n",
        "proj/settings.py": settings,
        "proj/celery.py": celery,
        "shop/__init__.py": "",
        "shop/tasks.py": tasks,
    }


#: The row the project's admin would hold: `shop.tasks.record` every 5 seconds.
ADD_ROW = f"""python manage.py shell -c '
from django_celery_beat.models import IntervalSchedule, PeriodicTask
every = IntervalSchedule.objects.create(every=5, period=IntervalSchedule.SECONDS)
PeriodicTask.objects.create(name="{ENTRY}", task="shop.tasks.record", interval=every)
'"""


@pytest.fixture(scope="session")
def migrating_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's requirements, then the page's install-from-checkout command, once.

    A real `python -m venv` and `pip install` of both (not this test run's packages):
    45 to 55 s with a warm pip cache.
    """
    return make_virtualenv(
        tmp_path_factory.mktemp("migrating") / "venv",
        PAGE,
        "install-from-checkout",
        requirements=REQUIREMENTS,
    )


@pytest.fixture
def broker_url() -> Iterator[str]:
    """A redis-server of the test's own, so no other test's worker shares its queue."""
    server = services.start_redis_server()
    yield server.url
    server.stop()


def test_install_line_matches_the_checkout_line() -> None:
    """The published install line asks for the same extra as the from-checkout one."""
    published = PAGE.block("install").text
    checkout = PAGE.block("install-from-checkout").text
    assert checkout.replace("path/to/safebeat", "safebeat") == published


def test_migration_guide_runs_as_written(
    tmp_path: Path, migrating_venv: Path, broker_url: str
) -> None:
    """Following the guide, three beats and a worker run each window once, with its outcome.

    Before: a Django project with django-celery-beat's tables and one row. Then the
    guide's steps as written: its settings added, its migrate and check commands, its
    `proj/celery.py` (the worker hook), its beat command in three replicas and its worker
    command. Every window of the row must be sent once, run once, and carry the outcome
    the worker hook records.
    """
    project = tmp_path / "project"
    traces = tmp_path / "traces"
    traces.mkdir()
    reader = Reader(migrating_venv, project, {})
    reader.write_files(
        {path: textwrap.dedent(text) for path, text in project_files(broker_url, traces).items()}
    )
    reader.run("python manage.py migrate")
    reader.run(ADD_ROW)

    add_settings(project / "proj/settings.py", PAGE.block("settings").text)
    files = PAGE.files()
    assert set(files) == {"proj/celery.py"}, set(files)
    reader.write_files(files)
    for command in PAGE.block("migrate").commands():
        reader.run(command)

    beat_logs = [tmp_path / f"beat-{index}.log" for index in range(REPLICAS)]
    worker_log = tmp_path / "worker.log"

    def logs() -> str:
        return tail([*beat_logs, worker_log])

    def ran() -> list[str]:
        return [json.loads(p.read_text())["task_id"] for p in traces.glob("*.json")]

    database = project / "db.sqlite3"
    beats = [reader.start(only_command(PAGE.block("beat")), log) for log in beat_logs]
    worker = reader.start(only_command(PAGE.block("worker")), worker_log)
    try:
        wait_for(
            lambda: len(ran()) >= WINDOWS,
            f"the worker to run {WINDOWS} windows",
            timeout=90,
            alive=[*beats, worker],
            logs=logs,
        )
        replicas = query(database, "SELECT replica FROM safebeat_replica")
        reader.stop(*beats)
        sent = query(database, "SELECT task_id FROM safebeat_dispatch WHERE status = 'sent'")
        wait_for(
            lambda: len(ran()) >= len(sent) and unfinished(database) == 0,
            "the worker to run and record every window the beats sent",
            timeout=30,
            alive=[worker],
            logs=logs,
        )
    finally:
        reader.stop()

    assert len(replicas) == REPLICAS, replicas
    rows = query(
        database,
        "SELECT entry, window_at, status, outcome, task_id FROM safebeat_dispatch"
        " ORDER BY window_at",
    )
    assert {row[0] for row in rows} == {ENTRY}, rows
    assert all(row[2] == "sent" and row[3] == "success" for row in rows), rows
    windows = [datetime.fromisoformat(row[1]) for row in rows]
    assert len(windows) >= WINDOWS, rows
    gaps = {later - earlier for earlier, later in itertools.pairwise(windows)}
    assert len(gaps) == 1, f"windows missing in {windows}"
    assert Counter(ran()) == Counter(row[4] for row in rows), "a window ran twice or never"
    # django-celery-beat's row counts the runs, as its own scheduler did.
    count = query(
        database,
        "SELECT total_run_count FROM django_celery_beat_periodictask WHERE name = ?",
        (ENTRY,),
    )
    assert count == [(len(rows),)], count


def query(
    database: Path, sql: str, parameters: tuple[object, ...] = ()
) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(database, timeout=10)) as connection:
        return list(connection.execute(sql, parameters))


def unfinished(database: Path) -> int:
    rows = query(database, "SELECT count(*) FROM safebeat_dispatch WHERE outcome IS NULL")
    return int(str(rows[0][0]))
