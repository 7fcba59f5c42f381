"""Reading past a flood written undiverted (as the outbox relay, a producer in another
language, a backfill tool or a restarted producer writes one), against the real
broker: the flooded partition's other tenants start long before the flood is done,
the flood runs in enqueue order, and a ``kill -9`` of the leasekeeper while it reads
past the flood loses nothing. Order properties and counts, never times."""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from producer.flood import FloodPolicy
from producer.request import JobRequest
from tests.integration.test_flood_diversion import producer, requests
from tests.integration.test_overflow import first_starts, in_order, neighbours
from tests.system import System, wait_until

FLOOD = 3_000
WINDOW = 120


@pytest.fixture(autouse=True)
def quick_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Noop jobs without their random sleep: the flood drains in seconds."""
    monkeypatch.setitem(os.environ, "RECORDING_MAX_MS", "0")


def _flood_then_others(system: System) -> tuple[list[str], list[str]]:
    with producer(system, FloodPolicy.off()) as jobs:
        flood = jobs.enqueue_batch(requests(system, "flood", FLOOD))
        behind = jobs.enqueue_batch(
            JobRequest(queue=system.queue, type="noop", payload={"n": 0}, tenant_id=t)
            for t in neighbours("flood", 12)
        )
    return flood, behind


def test_an_undiverted_flood_is_read_past_and_its_partitions_others_start_first(
    system: System,
) -> None:
    flood, behind = _flood_then_others(system)
    system.leasekeeper.extra_args += ["--window-records", str(WINDOW)]
    system.start(workers=1, concurrency=1)  # one process, one slot: starts are in order
    wait_until(lambda: set(system.acks()) >= set(flood) | set(behind), 120, "everything to run")
    finished = sorted(e.at for e in system.ack_events() if e.job_id in set(flood))
    late = [e for e in system.starts() if e.job_id in set(behind) and e.at > finished[4 * WINDOW]]
    assert late == [], f"{len(late)} of the other tenants' jobs waited for the flood"
    assert in_order(first_starts(system.starts()), flood), "the flood started out of order"
    system.wait_caught_up()


def test_kill_9_of_the_leasekeeper_while_it_reads_past_a_flood_loses_nothing(
    system: System,
) -> None:
    flood, behind = _flood_then_others(system)
    system.configure(lease_s=5.0)
    system.leasekeeper.extra_args += ["--window-records", str(WINDOW)]
    system.start(workers=1, concurrency=4)

    def reading_past() -> bool:
        floods = (system.leasekeeper.snapshot() or {}).get("floods") or []
        return bool(floods) and floods[0]["read_past"] >= len(behind)

    wait_until(reading_past, 60, "the leasekeeper to read past the flood")
    wait_until(lambda: len(set(system.acks()) & set(flood)) >= 300, 60, "the flood to run")
    system.leasekeeper.kill()
    at_kill = time.time()
    system.restart_leasekeeper()
    wait_until(lambda: set(system.acks()) >= set(flood) | set(behind), 120, "every job to run")
    starts = Counter(e.job_id for e in system.starts())
    reruns = sum(n - 1 for n in starts.values())
    acked_before = {e.job_id for e in system.ack_events() if e.at < at_kill}
    print(f"kill -9 while reading past a flood: {reruns} jobs started twice")
    # Only the jobs leased at the kill (4 running, as many prefetched) may run twice; an
    # acked job never does (the lease store survives the restart on the same disk).
    assert reruns <= 2 * 4
    assert not [j for j in acked_before if starts[j] > 1]
    assert in_order(first_starts(system.starts()), flood), "the flood started out of order"
    system.wait_caught_up()
