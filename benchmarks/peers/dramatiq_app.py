"""Dramatiq on Redis with its default middleware (retries, time limits, acks after run)."""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks import progress

ENV_URL = "BENCH_REDIS_URL"
QUEUE = "bench"

broker = RedisBroker(url=os.environ.get(ENV_URL, "redis://127.0.0.1:6379/0"))  # type: ignore[no-untyped-call]
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, max_retries=3)
def noop(n: int, blob: str) -> None:
    progress.hit()


@dramatiq.actor(queue_name=QUEUE, max_retries=3)
def io(n: int, blob: str, sleep_ms: float) -> None:
    time.sleep(sleep_ms / 1000)
    progress.hit()
