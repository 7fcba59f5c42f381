"""Dead letters seen by the metrics (issue 18, part 3), against the real broker: the DLQ
depth and the age of the newest dead letter, as Kafka counts them, on /metrics and in
``inspect``."""

from __future__ import annotations

import re
import time
import urllib.request

from devtools.localkafka import free_port
from tests.system import System, wait_until


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def gauge(text: str, name: str) -> float | None:
    found = re.search(rf'^{name}\{{queue="[^"]+"\}} (\S+)$', text, re.M)
    return None if found is None else float(found.group(1))


def test_dlq_depth_and_newest_age_are_exported(system: System) -> None:
    port = free_port()
    system.configure(lease_s=30, extra=["--metrics-port", str(port)])
    system.start(workers=1, concurrency=4)
    wait_until(lambda: gauge(scrape(port), "leasekeeper_dlq_depth") == 0, 60, "an empty DLQ")
    assert gauge(scrape(port), "leasekeeper_dlq_newest_age_seconds") is None

    system.enqueue_tasks(3, fail_attempts=1, permanent=True)
    wait_until(lambda: len(system.dead_letters()) == 3, 60, "three dead letters")
    died = time.time()
    wait_until(lambda: gauge(scrape(port), "leasekeeper_dlq_depth") == 3, 60, "the DLQ depth")
    text = scrape(port)
    age = gauge(text, "leasekeeper_dlq_newest_age_seconds")
    assert age is not None and 0 <= age <= time.time() - died + 60
    snap = system.leasekeeper.snapshot()
    assert snap is not None and snap["dead_letters"]["depth"] == 3
