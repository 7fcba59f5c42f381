"""A prefetching worker against a fake leasekeeper: its claims say how many jobs go to
idle handlers, and its heartbeats report the start of the jobs that waited."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_worker_support import (
    Envelopes,
    FakeLeaseKeeper,
    running_worker,
    serving,
    wait_until,
)
from workers.app import App
from workers.context import JobContext


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "lk.sock"


def test_claims_name_idle_handlers_and_heartbeats_report_waiting_jobs_that_start(
    sock: Path,
) -> None:
    app = App()
    release = threading.Semaphore(0)
    started: list[str] = []

    @app.job("noop")
    def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        started.append(ctx.lease_id)
        release.acquire(timeout=10)

    envelopes = Envelopes()
    fake = FakeLeaseKeeper([envelopes() for _ in range(4)])
    with (
        serving(fake, sock) as target,
        running_worker(app, target, concurrency=2, prefetch=2) as rw,
    ):
        wait_until(lambda: len(started) == 2 and rw.worker.in_hand == 4, what="2 run, 2 wait")
        assert fake.starts_at_claim[0] == 2, "both handlers were idle at the first claim"
        assert all(n == 0 for n in fake.starts_at_claim[1:]), fake.starts_at_claim
        release.release()  # one job ends; a waiting one starts, and runs on
        wait_until(lambda: len(started) == 3, what="a waiting job to start")
        wait_until(lambda: started[2] in fake.started, what="its start reported")
        for _ in range(4):
            release.release()
        wait_until(lambda: len(fake.outcomes("ack")) == 4, what="4 acks")


def test_without_prefetch_claims_do_not_ask_for_start_reports(sock: Path) -> None:
    app = App()

    @app.job("noop")
    def quick(ctx: JobContext, payload: dict[str, Any]) -> None:
        pass

    envelopes = Envelopes()
    fake = FakeLeaseKeeper([envelopes() for _ in range(3)])
    with (
        serving(fake, sock) as target,
        running_worker(app, target, concurrency=2, prefetch=1),
    ):
        wait_until(lambda: len(fake.outcomes("ack")) == 3, what="3 acks")
    assert fake.starts_at_claim == []
