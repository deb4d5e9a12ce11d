"""docs/web.md as a reader uses it: `safebeat web -A proj` prints what the page shows,
`celery -A proj safebeat web` serves the same console, and the page's FastAPI `main.py`
mounts a console that asks for its password and acts."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from safebeat import Scheduler
from safebeat.stores import open_store
from tests import services
from tests.docpages import Page, missing_lines

PAGE = Page(Path(__file__).parents[2] / "docs" / "web.md")
SECURITY = Page(Path(__file__).parents[2] / "docs" / "security.md")


@pytest.fixture
def project(
    tmp_path: Path, redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A `proj` package whose beat ran one tick on a SQLite store in `tmp_path`."""
    package = tmp_path / "proj"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "celery.py").write_text(
        "from celery import Celery\n"
        f"app = Celery('proj', broker={redis_url!r}, set_as_current=False)\n"
        f"app.conf.update(safebeat_url='sqlite:///{tmp_path}/safebeat.sqlite3',\n"
        f"    task_default_queue={namespace!r}, result_expires=None,\n"
        "    beat_scheduler='safebeat.Scheduler',\n"  # no periodic task rows, whatever Django
        "    beat_schedule={'send-invoices': {'task': 'proj.send', 'schedule': 60.0}})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    # Not a Django project: where another test configured Django in this process, the
    # console would otherwise read django-celery-beat's rows too (it cannot see beat's -S).
    monkeypatch.setattr("safebeat.entries.app_entries.periodic_tasks_reason", lambda app: None)
    for name in ("proj", "proj.celery", "main"):
        sys.modules.pop(name, None)
    from proj.celery import app  # type: ignore[import-not-found]

    scheduler = Scheduler(app)
    scheduler.tick()
    scheduler.close()
    yield tmp_path
    for name in ("proj", "proj.celery", "main"):
        sys.modules.pop(name, None)
    redis.Redis.from_url(redis_url).delete(namespace)


def test_safebeat_web_prints_what_the_page_shows(project: Path) -> None:
    """`safebeat web -A proj` says where it serves in the words of the page's output block."""
    command = PAGE.block("serve").text.split()
    assert command == ["safebeat", "web", "-A", "proj"]
    port = services.free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "safebeat", *command[1:], "--bind", f"127.0.0.1:{port}"],
        cwd=project,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
    finally:
        process.terminate()
        process.wait(20)
    assert not missing_lines(PAGE.block("serving").text, first), first


def test_the_fastapi_recipe_mounts_a_console_behind_its_password(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's main.py serves the console under /safebeat at ops.example.com, asks
    for the password, and pauses an entry with a POST from its own form; another host
    gets 400."""
    (project / "main.py").write_text(PAGE.files()["main.py"])
    monkeypatch.setenv("SAFEBEAT_WEB_PASSWORD", "correct horse")
    main = importlib.import_module("main")
    with TestClient(main.app, base_url="https://ops.example.com") as client:
        assert client.get("/safebeat/").status_code == 401
        client.auth = ("ops", "correct horse")
        entries = client.get("/safebeat/")
        assert entries.status_code == 200
        assert 'href="/safebeat/entries/send-invoices"' in entries.text
        page = client.get("/safebeat/entries/send-invoices").text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert token
        paused = client.post(
            "/safebeat/entries/send-invoices/pause", data={"csrf_token": token.group(1)}
        )
        assert paused.status_code == 200
        assert client.get("/safebeat/", headers={"Host": "evil.example"}).status_code == 400
    store = open_store(f"sqlite:///{project}/safebeat.sqlite3")
    assert store.states("proj")["send-invoices"].paused
    store.close()


def test_celery_safebeat_web_serves_the_same_console(project: Path) -> None:
    """`celery -A proj safebeat web` serves the console of celery's app, as the page says."""
    assert "`celery -A proj safebeat web`" in PAGE.path.read_text()
    port = services.free_port()
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery"), "-A", "proj", "safebeat", "web",
         "--bind", f"127.0.0.1:{port}"],
        cwd=project,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert "namespace 'proj' (read-write)" in first, first
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as page:
                    assert 'data-entry="send-invoices"' in page.read().decode()
                    break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, "celery safebeat web did not serve"
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(20)


def test_the_console_behind_a_proxy_answers_its_names_only(project: Path) -> None:
    """docs/security.md's command serves a console that answers ops.example.com and its
    loopback address, with the token, and any other host with 400."""
    assignment, *command = SECURITY.block("behind-a-proxy").text.split()
    variable, _, _ = assignment.partition("=")
    assert variable == "SAFEBEAT_WEB_TOKEN"
    assert command[:2] == ["safebeat", "web"]
    port = services.free_port()
    command = [word.replace(":8765", f":{port}") for word in command]
    process = subprocess.Popen(
        [sys.executable, "-m", "safebeat", *command[1:]],
        cwd=project,
        env={**os.environ, variable: "s3cret-token"},
        stderr=subprocess.DEVNULL,
    )
    try:
        answers = {}
        deadline = time.monotonic() + 30
        for host in ("ops.example.com", f"127.0.0.1:{port}", "evil.example"):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/",
                headers={"Host": host, "Authorization": "Bearer s3cret-token"},
            )
            while host not in answers:
                try:
                    with urllib.request.urlopen(request, timeout=2) as page:  # noqa: S310
                        answers[host] = page.status
                except urllib.error.HTTPError as refused:
                    answers[host] = refused.code
                except (urllib.error.URLError, ConnectionError):
                    assert time.monotonic() < deadline, "safebeat web did not serve"
                    time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(20)
    assert answers == {"ops.example.com": 200, f"127.0.0.1:{port}": 200, "evil.example": 400}
