"""Screenshots of every dashboard page under ``make run``'s demo, for docs/dashboard.

``python -m devtools.dashboard_shots [--bootstrap HOST:PORT] [--out docs/dashboard]``
runs the demo (its own Kafka unless ``--bootstrap`` is given), logs in through the
link it prints, waits until the pages have something to show (a dead letter, a
delayed job, a cron fire, a job to look up), saves one PNG per page with headless
Chromium, and stops the demo as a terminal's Ctrl-C does. It refuses to save a
page whose body is empty.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

LINK = re.compile(r"(http://127\.0\.0\.1:\d+)/login\?token=([\w-]+)")
SUCCEEDED = re.compile(r"job (\w+) \(\w+\) succeeded")
QUEUE = "demo"


def _wait(what: str, check: Callable[[], object], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)  # a person's demo: polled, not awaited
    raise SystemExit(f"gave up waiting for {what} after {timeout_s:.0f}s")


def _api(base: str, token: str, path: str) -> Any:
    """The dashboard's JSON answer; None while it does not answer yet."""
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())
    except OSError:
        return None


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--window-size=1280,1400", "--disable-gpu"):  # fmt: skip
        options.add_argument(flag)
    driver = shutil.which("chromedriver") or "chromedriver"
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def _shoot(browser: Any, url: str, out: Path, name: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(url)
    body = browser.find_element(By.TAG_NAME, "body").text.strip()
    if len(body) < 40:
        raise SystemExit(f"{name}: the page at {url} is empty: {body!r}")
    browser.save_screenshot(str(out / f"{name}.png"))
    print(f"saved {name}.png ({url})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="a running Kafka (default: the demo starts its own)")
    parser.add_argument("--out", default="docs/dashboard", type=Path)
    options = parser.parse_args(argv)
    options.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dashboard-shots-"))
    output = (work / "demo.out").open("wb")
    command = [sys.executable, "-m", "devtools.demo", "--workdir", str(work / "demo"),
               "--queue", QUEUE]  # fmt: skip
    if options.bootstrap:
        command += ["--bootstrap", options.bootstrap]
    env = {**os.environ, "COLUMNS": "200", "LOG_LEVEL": "debug"}  # workers name each job
    demo = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)  # fmt: skip
    try:

        def text() -> str:
            return (work / "demo.out").read_text(errors="replace")

        base, token = _wait("the demo's login link", lambda: LINK.search(text()), 300).groups()
        queue = QUEUE

        def overview() -> dict[str, Any]:
            answer = _api(base, token, "/api/overview") or {}
            queues: dict[str, Any] = answer.get("queues", {})
            return queues

        _wait("a dead letter", lambda: (overview().get(queue) or {}).get("dlq_depth"), 240)
        worker_log = work / "demo" / "worker-0.log"
        done = _wait(
            "a finished job",
            lambda: (
                worker_log.exists() and SUCCEEDED.findall(worker_log.read_text(errors="replace"))
            ),
            60,
        )
        browser = _browser()
        try:
            browser.get(f"{base}/login?token={token}")
            _shoot(browser, f"{base}/", options.out, "overview")
            _shoot(browser, f"{base}/queues/{queue}", options.out, "queue")
            _shoot(browser, f"{base}/leasekeepers", options.out, "leasekeepers")
            _shoot(browser, f"{base}/dlq/{queue}", options.out, "dead-letters")
            from selenium.webdriver.common.by import By

            letters = [a.get_attribute("href") for a in browser.find_elements(By.TAG_NAME, "a")]
            one = next(h for h in letters if h and re.search(rf"/dlq/{queue}/\d+/\d+", h))
            _shoot(browser, one, options.out, "dead-letter")
            _shoot(browser, f"{base}/scheduled", options.out, "scheduled")
            _shoot(browser, f"{base}/job?id={done[-1]}&queue={queue}", options.out, "job")
        finally:
            browser.quit()
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        output.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
