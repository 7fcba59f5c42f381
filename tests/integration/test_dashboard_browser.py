"""The dashboard in a real browser: headless Chromium from the system's packages.

Kafka, a leasekeeper and a worker run as users run them; jobs succeed, one
fails and is retried, one dies, and a cron scheduler fires every second. The
browser opens every page (the Scheduled page with the cron entry's next and last
fires), counts the dead letter with a dry run, replays it from its page, and
sees it succeed. Under
``CI=true`` a missing browser fails the test (``make browser`` installs it);
elsewhere it is skipped with the command that installs it.

With ``DASHBOARD_SCREENSHOTS=DIR`` the test also saves the main pages as PNGs
(``docs/dashboard/`` holds the ones the docs show).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devtools.waiting import wait_until
from producer import JobProducer
from producer.scheduler import CronEntry, Scheduler, SchedulerOptions
from schemas.codec import SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.system import System

pytestmark = pytest.mark.kafka

BIN = Path(sys.executable).parent


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    message = "Chromium and chromedriver are not installed: run `make browser` (as root)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture
def browser() -> Iterator[object]:
    chromium, driver = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1280,900", "--disable-gpu"):  # fmt: skip
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def dashboard_url(system: System, tmp_path: Path) -> Iterator[str]:
    log = tmp_path / "dashboard.log"
    cmd = [
        str(BIN / "leasekeeper"), "dashboard", "--listen", "127.0.0.1:0",
        "--bootstrap", system.kafka.bootstrap, "--insecure", "--schema-path", str(SCHEMAS),
    ]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        found: list[str] = []

        def started() -> bool:
            assert process.poll() is None, log.read_text()
            found[:] = re.findall(r"dashboard on (http://\S+)", log.read_text())
            return bool(found)

        wait_until(started, 60, "the dashboard to print its address")
        yield found[0].rstrip("/")
    finally:
        process.terminate()
        process.wait(30)


def _open(browser: object, url: str, *, expect: str, timeout: float = 60) -> str:
    """Load ``url`` and reload until the page shows ``expect`` (live data arrives)."""
    from selenium.webdriver.common.by import By

    def shows() -> bool:
        browser.get(url)  # type: ignore[attr-defined]
        return expect in browser.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]

    wait_until(shows, timeout, f"{url} to show {expect!r}", step=1.0)
    return str(browser.find_element(By.TAG_NAME, "body").text)  # type: ignore[attr-defined]


def _result(browser: object) -> str:
    """The text of a replay's result page, once the browser has loaded it."""
    from selenium.webdriver.common.by import By

    def loaded() -> bool:
        return bool(browser.find_elements(By.ID, "replay-result"))  # type: ignore[attr-defined]

    wait_until(
        loaded,
        60,
        "the replay's result page",
        describe=lambda: browser.find_element(By.TAG_NAME, "body").text,  # type: ignore[attr-defined]
    )
    return str(browser.find_element(By.ID, "replay-result").text)  # type: ignore[attr-defined]


@contextmanager
def _cron(system: System, name: str) -> Iterator[None]:
    """A cron scheduler firing ``name`` every second on the system's queue."""
    tick = CronEntry(name=name, schedule="*/1 * * * * *", queue=system.queue, type="noop",
                     tenant="tenant-0", payload={"n": 0})  # fmt: skip
    options = SchedulerOptions(name=f"ui-{system.queue}")
    registry = SchemaRegistry(extra_dirs=[SCHEMAS])
    scheduler = Scheduler(system.kafka, options=options, entries=[tick], registry=registry)
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)


def _shot(browser: object, name: str) -> None:
    where = os.environ.get("DASHBOARD_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(where) / f"{name}.png"))  # type: ignore[attr-defined]


def test_every_page_and_a_replay_from_the_page(
    system: System, browser: object, dashboard_url: str
) -> None:
    from selenium.webdriver.common.by import By

    (system.recordings / "broken").touch()
    system.start(workers=1)
    succeeded = system.enqueue(20, tenants=3)
    system.enqueue_tasks(1, tenant="tenant-1", fail_attempts=1)  # fails once, then succeeds
    (dead,) = system.enqueue_tasks(1, tenant="tenant-2", fail_while_broken=True)
    queue = system.queue

    _open(browser, f"{dashboard_url}/", expect=queue)
    _shot(browser, "overview")
    _open(browser, f"{dashboard_url}/queues/{queue}", expect=f"{queue}@lk-{queue}")
    _shot(browser, "queue")
    _open(browser, f"{dashboard_url}/leasekeepers", expect=f"{queue}@lk-{queue}")
    _shot(browser, "leasekeepers")
    with _cron(system, "ui-tick"):
        text = _open(browser, f"{dashboard_url}/scheduled", expect="ui-tick")
        assert "tier topic" in text and "*/1 * * * * * (UTC)" in text

        ours = f"//tr[td[1]='ui-{queue}']"  # the broker may hold other schedulers' rows

        def fired() -> bool:  # the page refreshes itself; a fire shows as the last fire
            links = browser.find_elements(By.XPATH, f"{ours}//a[@class='cron-job']")  # type: ignore[attr-defined]
            return bool(links)

        wait_until(fired, 60, "the cron entry's last fire on the Scheduled page")
        row = browser.find_element(By.XPATH, ours).text  # type: ignore[attr-defined]
        assert "ui-tick" in row and row.count("Z (") == 2, row  # next and last fire
        heading = browser.find_element(By.XPATH, "//h2[text()='Cron entries']")  # type: ignore[attr-defined]
        browser.execute_script("arguments[0].scrollIntoView()", heading)  # type: ignore[attr-defined]
        _shot(browser, "scheduled")
    text = _open(browser, f"{dashboard_url}/job?id={succeeded[0]}", expect="succeeded")
    assert queue in text and "(handler run time)" in text

    _open(browser, f"{dashboard_url}/dlq/{queue}", expect="1 matching dead letters")
    _shot(browser, "dead-letters")
    browser.find_element(By.ID, "dry-run").click()  # type: ignore[attr-defined]
    result = _result(browser)
    assert result.startswith("would replay 1 "), result

    _open(browser, f"{dashboard_url}/dlq/{queue}", expect=dead)
    browser.find_element(By.LINK_TEXT, dead).click()  # type: ignore[attr-defined]
    wait_until(
        lambda: bool(browser.find_elements(By.ID, "replay-one")),  # type: ignore[attr-defined]
        60,
        "the dead letter's page",
    )
    entry = browser.find_element(By.TAG_NAME, "body").text  # type: ignore[attr-defined]
    assert "Attempt history" in entry and "the dependency is broken" in entry
    _shot(browser, "dead-letter")
    (system.recordings / "broken").unlink()
    browser.find_element(By.ID, "replay-one").click()  # type: ignore[attr-defined]
    result = _result(browser)
    assert result.startswith("replayed 1 "), result

    _open(browser, f"{dashboard_url}/job?id={dead}", expect="succeeded", timeout=90)

    # The library answers for finished jobs: through the dashboard, and from the topic.
    with JobProducer(system.kafka) as producer:
        via_dashboard = producer.status(queue, dead, dashboard=dashboard_url)
        via_topic = producer.status(queue, succeeded[1])
    assert (via_dashboard.state, via_dashboard.source) == (
        "succeeded",
        f"dashboard {dashboard_url}",
    )
    assert via_topic.state == "succeeded" and via_topic.source.startswith("status topic")
    assert via_topic.worker  # the status record names the worker that ran it
