"""Celery on Redis, configured the way a careful user would for at-least-once jobs.

``task_acks_late``: a task is acknowledged after it ran, so a crashed worker's
tasks come back (Celery's counterpart of our leases). No result backend: our
queue stores no results either. The worker uses the threads pool, the same
execution model our workers and Dramatiq use.
"""

from __future__ import annotations

import os
import time

from celery import Celery

from benchmarks import progress

ENV_URL = "BENCH_REDIS_URL"
QUEUE = "bench"

app = Celery("bench", broker=os.environ.get(ENV_URL, "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=4,
    broker_transport_options={"visibility_timeout": 3600},
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")  # type: ignore[untyped-decorator]
def noop(n: int, blob: str) -> None:
    progress.hit()


@app.task(name="bench.io")  # type: ignore[untyped-decorator]
def io(n: int, blob: str, sleep_ms: float) -> None:
    time.sleep(sleep_ms / 1000)
    progress.hit()
