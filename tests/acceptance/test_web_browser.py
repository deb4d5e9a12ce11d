"""The web console in a real browser: `safebeat web` serving a store that two real
`celery beat` replicas and a worker with the worker hook fill, driven by Debian's Chromium
through Selenium.

Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (`apt-get install chromium
chromium-driver`; `.ci/run` installs them); skipped, saying so, where they are missing.
Selenium is given both paths, so its driver manager never downloads anything. The
entries page and an entry's page are saved as `web-entries.png` and `web-entry.png` in the
test's folder, and also in `$SAFEBEAT_SCREENSHOTS` when that names a folder (the
screenshots in docs/ are made so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from safebeat.identity import format_window
from safebeat.stores import open_store
from safebeat.stores.protocols import DispatchRecord, Outcome, Store
from tests import runscope, services
from tests.acceptance.harness import ROOT, Cluster

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres, pytest.mark.xdist_group("acceptance")]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
APP = "tests.acceptance.webapp"
ENTRY = "send-invoices"
#: An entry whose name, unencoded in a path, leads to ENTRY's.
TRICKY = f"reports/../{ENTRY}"
#: The webapp's entries; the pictures in docs/ leave TRICKY out.
ENTRIES = {ENTRY, "sync-crm", "weekly-report"} | (
    set() if os.environ.get("SAFEBEAT_SCREENSHOTS") else {TRICKY}
)
#: A name Chromium resolves to 127.0.0.1, as a DNS rebinding attacker's domain does.
EVIL = "evil.example"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,800",
    f"--host-resolver-rules=MAP {EVIL} 127.0.0.1",
)
#: What a page of the attacker's domain runs once its name resolves to the console: read
#: an entry's page for its CSRF token (and cookie), then pause the entry with them.
REBINDING_ATTACK = """
const done = arguments[arguments.length - 1];
(async () => {
  const page = await fetch("/entries/send-invoices");
  const found = (await page.text()).match(/name="csrf_token" value="([^"]+)"/);
  const pause = await fetch("/entries/send-invoices/pause", {
    method: "POST",
    headers: {"Content-Type": "application/x-www-form-urlencoded"},
    body: "csrf_token=" + (found ? found[1] : "none"),
  });
  return [page.status, pause.status];
})().then(done, (error) => done(String(error)));
"""


def _browser_missing() -> str | None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        return (
            f"no {' or '.join(missing)}: install Debian's browser with "
            "`apt-get install chromium chromium-driver` to run the browser test"
        )
    return None


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium with a fresh profile, through the distribution's chromedriver."""
    reason = _browser_missing()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never fetch anything
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


@pytest.fixture
def shop_store(pg_url: str, pg_admin_url: str, namespace: str) -> Iterator[tuple[str, str]]:
    """The store URL and namespace the console shows: the test's own, or, for the pictures
    in docs/ (`$SAFEBEAT_SCREENSHOTS`), a database and a namespace named as a user's are."""
    if not os.environ.get("SAFEBEAT_SCREENSHOTS"):
        yield pg_url, namespace
        return
    url = services.create_database(pg_admin_url, "shop")
    try:
        yield url, "shop"
    finally:
        services.drop_database(pg_admin_url, "shop")


@pytest.fixture
def shop(tmp_path: Path, redis_url: str, shop_store: tuple[str, str]) -> Iterator[Cluster]:
    """Two `celery beat -S safebeat.Scheduler` replicas on PostgreSQL and one worker."""
    pg_url, namespace = shop_store
    queue = runscope.unique("web")
    processes = Cluster(
        workdir=tmp_path,
        broker_url=redis_url,
        queue=queue,
        schedule={},
        app=APP,
        env={"SAFEBEAT_URL": pg_url, "SAFEBEAT_NAMESPACE": namespace},
    )
    processes.start(2)
    processes.start_workers(1)
    try:
        processes.wait_started()
        yield processes
    finally:
        processes.stop()
        redis.Redis.from_url(redis_url).delete(queue)


@dataclass
class Console:
    """A served console, the processes filling its store, and where the test keeps files."""

    base: str
    shop: Cluster
    store_url: str
    namespace: str
    folder: Path


@pytest.fixture
def console(shop: Cluster, tmp_path: Path, shop_store: tuple[str, str]) -> Iterator[Console]:
    """`safebeat web -A tests.acceptance.webapp` on a free loopback port."""
    pg_url, namespace = shop_store
    port = services.free_port()
    environment = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SB_BROKER_URL": shop.broker_url,
        "SB_QUEUE": shop.queue,
        **shop.env,
    }
    log = (tmp_path / "web.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "safebeat", "-A", APP, "web", "--bind", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_serving(base, process, tmp_path / "web.log")
        yield Console(base, shop, pg_url, namespace, tmp_path)
    finally:
        process.terminate()
        process.wait(20)
        log.close()


def _wait_serving(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, f"safebeat web exited:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"{base}/static/console.css", timeout=2):  # noqa: S310
                return
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, f"safebeat web did not serve:\n{log.read_text()}"
            time.sleep(0.2)


def _wait_for(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _outcomes(store: Store, namespace: str, entry: str) -> set[Outcome]:
    return {r.outcome for r in store.history(namespace, entry) if r.outcome is not None}


def test_an_operator_pauses_triggers_and_backfills_in_chromium(
    browser: Any, console: Console
) -> None:
    """Clicking pause (with a note), resume, trigger and a previewed backfill changes the
    store as the CLI would; the entries page marks the failing entry and the paused one,
    and the audit page lists each action."""
    from selenium.webdriver.common.by import By

    namespace = console.namespace
    store: Store = open_store(console.store_url)
    try:
        _wait_for(
            lambda: (
                Outcome.SUCCESS in _outcomes(store, namespace, ENTRY)
                and Outcome.FAILURE in _outcomes(store, namespace, "sync-crm")
            ),
            "a success of send-invoices and a failure of sync-crm",
            timeout=60,
        )
        browser.get(console.base + "/")
        rows = browser.find_elements(By.CSS_SELECTOR, "#entries tbody tr")
        assert {r.get_attribute("data-entry") for r in rows} == ENTRIES
        failing = browser.find_element(By.CSS_SELECTOR, 'tr[data-entry="sync-crm"]')
        assert "failing" in failing.text

        browser.find_element(By.LINK_TEXT, "weekly-report").click()
        browser.find_element(By.ID, "pause-note").send_keys("new template next week")
        browser.find_element(By.ID, "pause").click()
        _wait_for(lambda: _text(browser, "done").startswith("Paused"), "the paused page")
        assert store.states(namespace)["weekly-report"].pause_note == "new template next week"
        browser.find_element(By.LINK_TEXT, "Entries").click()
        paused = browser.find_element(By.CSS_SELECTOR, 'tr[data-entry="weekly-report"]')
        assert "paused" in paused.text
        assert "new template next week" in paused.text
        _save_screenshot(browser, console.folder, "web-entries.png")

        browser.find_element(By.LINK_TEXT, ENTRY).click()
        browser.find_element(By.ID, "pause").click()
        _wait_for(lambda: _text(browser, "done").startswith("Paused"), "the paused page")
        assert store.states(namespace)[ENTRY].paused
        browser.find_element(By.ID, "resume").click()
        _wait_for(lambda: _text(browser, "done") == "Resumed.", "the resumed page")
        assert not store.states(namespace)[ENTRY].paused

        browser.find_element(By.ID, "trigger").click()
        assert "sent (task id" in browser.find_element(By.ID, "published").text
        [row] = [r for r in store.history(namespace, ENTRY, limit=200) if r.reason == "trigger"]
        assert row.task_id in browser.find_element(By.ID, "published").text
        _wait_for(
            lambda: _row(store, namespace, row.id).outcome is Outcome.SUCCESS,
            "the worker to run the triggered window",
        )

        anchor = store.states(namespace)[ENTRY].anchor
        start = format_window(anchor - timedelta(seconds=6))
        end = format_window(anchor - timedelta(seconds=1))
        browser.find_element(By.LINK_TEXT, f"Back to {ENTRY}").click()
        browser.find_element(By.ID, "backfill-start").send_keys(start)
        browser.find_element(By.ID, "backfill-end").send_keys(end)
        browser.find_element(By.ID, "backfill-preview").click()
        previewed = [
            shown.get_attribute("datetime")
            for shown in browser.find_elements(By.CSS_SELECTOR, "#preview li time")
        ]
        assert len(previewed) == 3  # every 2 s in [anchor - 6 s, anchor - 1 s]
        assert not _backfilled(store, namespace)
        browser.find_element(By.ID, "backfill-confirm").click()
        assert browser.find_element(By.ID, "published").text.count("sent (task id") == 3
        assert sorted(format_window(r.window) for r in _backfilled(store, namespace)) == previewed

        browser.find_element(By.LINK_TEXT, f"Back to {ENTRY}").click()
        assert browser.find_element(By.CSS_SELECTOR, "svg.strip")
        _save_screenshot(browser, console.folder, "web-entry.png")

        browser.find_element(By.LINK_TEXT, "Audit").click()
        actions = [
            tr.get_attribute("class") for tr in browser.find_elements(By.CSS_SELECTOR, "#audit tr")
        ]
        assert actions[1:] == ["a-backfill", "a-trigger", "a-resume", "a-pause", "a-pause"]
    finally:
        store.close()


def test_a_rebinding_page_and_a_name_that_is_a_path_change_nothing_in_chromium(
    browser: Any, console: Console
) -> None:
    """DNS rebinding: a page of evil.example, which Chromium resolves to 127.0.0.1, asks
    for an entry's page to take its CSRF token, then pauses the entry with it: both
    requests get 400 and nothing is paused. Then the entry named
    `reports/../send-invoices` opens its own page, and its pause and resume buttons act on
    it alone, not on send-invoices."""
    from selenium.webdriver.common.by import By

    namespace = console.namespace
    store: Store = open_store(console.store_url)
    try:
        port = console.base.rpartition(":")[2]
        # The attacker's page was served by the attacker, under their own policy: let it
        # run its script where the console's 400 answer (which allows none) now stands.
        browser.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})
        browser.get(f"http://{EVIL}:{port}/entries/{ENTRY}")
        assert "does not answer to the host" in browser.find_element(By.TAG_NAME, "body").text
        assert not browser.find_elements(By.TAG_NAME, "form")
        assert browser.execute_async_script(REBINDING_ATTACK) == [400, 400]
        assert not store.states(namespace)[ENTRY].paused
        assert store.audit(namespace) == []

        browser.get(console.base + "/")
        browser.find_element(By.LINK_TEXT, TRICKY).click()
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith(TRICKY)
        browser.find_element(By.ID, "pause").click()
        _wait_for(lambda: _text(browser, "done").startswith("Paused"), "the paused page")
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith(TRICKY)
        states = store.states(namespace)
        assert (states[TRICKY].paused, states[ENTRY].paused) == (True, False)
        browser.find_element(By.ID, "resume").click()
        _wait_for(lambda: _text(browser, "done") == "Resumed.", "the resumed page")
        assert not store.states(namespace)[TRICKY].paused
        assert [(r.action.value, r.entry) for r in store.audit(namespace)] == [
            ("resume", TRICKY),
            ("pause", TRICKY),
        ]
    finally:
        store.close()


def _row(store: Store, namespace: str, row_id: int) -> DispatchRecord:
    [row] = [r for r in store.history(namespace, ENTRY, limit=200) if r.id == row_id]
    return row


def _backfilled(store: Store, namespace: str) -> list[DispatchRecord]:
    return [r for r in store.history(namespace, ENTRY, limit=200) if r.reason == "backfill"]


def _text(browser: Any, element_id: str) -> str:
    """The text of the element with that id on the current page, or "" while there is none."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return str(browser.find_element(By.ID, element_id).text)
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def _save_screenshot(browser: Any, folder: Path, name: str) -> None:
    """The whole page (the window grown to its height), in `folder` and $SAFEBEAT_SCREENSHOTS."""
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(1400, min(max(height + 200, 600), 2400))  # + the window frame
    path = folder / name
    assert browser.save_screenshot(str(path)), "Chromium saved no screenshot"
    assert path.stat().st_size > 1000
    extra = os.environ.get("SAFEBEAT_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / name)
