"""The pytest plugin: its fixtures, and that loading it costs a session nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jobtesting import FakeClock, MemoryQueue
from producer import JobProducer

ROOT = Path(__file__).resolve().parents[2]


def test_the_fixtures_share_one_queue_and_clock(
    job_queue: MemoryQueue, job_producer: JobProducer, fake_clock: FakeClock
) -> None:
    assert job_queue.clock is fake_clock
    assert job_producer is job_queue.producer()
    before = fake_clock.time()
    fake_clock.advance(90)
    assert fake_clock.time() == before + 90


def test_loading_the_plugin_imports_nothing_of_the_queue() -> None:
    """A session that installs the package but uses no fixture pays for one module."""
    code = (
        "import sys, jobtesting.plugin\n"
        "heavy = ('producer', 'leasekeeper', 'workers', 'memkafka', 'schemas', 'jobcore',"
        " 'confluent_kafka', 'grpc')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy)"
        " + sorted(m for m in sys.modules if m.startswith('jobtesting.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    assert done.stdout.strip() == "['jobtesting.plugin']"
