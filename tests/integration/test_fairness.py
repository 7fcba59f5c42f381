"""Fair under floods, against the real broker: order properties, never times (issue 10)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from producer.request import JobRequest
from tests.system import PARTITIONS, System, wait_until

OTHERS = [f"other-{i}" for i in range(12)]


def ready_by_tenant(system: System) -> dict[str, int]:
    snap: dict[str, Any] | None = system.leasekeeper.snapshot()
    return {} if snap is None else dict(snap["ready_by_tenant"])


def test_a_full_window_lets_a_partition_without_the_flood_fetch(system: System) -> None:
    """One tenant's backlog fills the window; the other partitions' jobs still come in,
    within a fetch, although no worker drains the flood."""
    # Each partition's share of the window (its records over the 36 partitions assigned:
    # ready, classes, overflow lane, tiers) takes the three jobs each one gets below.
    system.leasekeeper.extra_args += ["--window-records", "120"]
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    system.enqueue(1_000, tenants=1)  # all of it on tenant-0's partition
    wait_until(lambda: ready_by_tenant(system).get("tenant-0", 0) >= 100, 30, "the flood")
    flood_partition = max(system.end_offsets().items(), key=lambda kv: kv[1])[0]
    before = system.end_offsets()
    system.enqueue_requests(system.task_request(i, tenant=t) for i, t in enumerate(OTHERS))
    after = system.end_offsets()
    elsewhere = {p for p in after if p != flood_partition and after[p] > before[p]}
    assert elsewhere, "some other tenant lands on another partition"

    def fetched_elsewhere() -> bool:
        snap = system.leasekeeper.snapshot()
        assert snap is not None
        highest = {
            p["partition"]: p["highest_fetched"]
            for p in snap["partitions"]
            if p["topic"] == system.topics.ready
        }
        return all(highest.get(p, -1) >= after[p] - 1 for p in elsewhere)

    wait_until(fetched_elsewhere, 30, "the jobs outside the flooded partition to be fetched")
    assert ready_by_tenant(system)["tenant-0"] < 1_000, "the flood is still held back"


def flood_requests(system: System, count: int, klass: str) -> Iterator[JobRequest]:
    for n in range(count):
        yield JobRequest(queue=system.queue, type="noop", payload={"n": n},
                         tenant_id="flood", priority=klass)  # fmt: skip


def test_a_critical_job_behind_a_bulk_backlog_starts_before_the_next_200_bulk_jobs(
    system: System,
) -> None:
    system.start(workers=1, concurrency=4)
    system.enqueue_requests(flood_requests(system, 3_000, "bulk"))
    wait_until(lambda: len(system.starts()) >= 100, 60, "the bulk backlog to be running")
    started_before = len(system.starts())
    urgent = JobRequest(queue=system.queue, type="noop", payload={"n": 0},
                        tenant_id="reset", priority="critical")  # fmt: skip
    (critical,) = system.enqueue_requests([urgent])
    wait_until(lambda: critical in {e.job_id for e in system.starts()}, 60, "the critical job")
    order = [e.job_id for e in system.starts()]  # one worker process: its file is in order
    assert order.index(critical) - started_before < 200, (order.index(critical), started_before)


def test_an_unknown_priority_class_is_refused_with_the_known_names(system: System) -> None:
    with pytest.raises(ValueError, match="unknown priority class 'urgent': use one of critical"):
        system.enqueue_requests(flood_requests(system, 1, "urgent"))


def test_a_critical_job_claimed_behind_prefetched_jobs_runs_before_them(system: System) -> None:
    """One handler and four jobs in hand (prefetch 4): a critical job claimed after
    them runs at the latest right after the one that was running when it came, not
    after the three prefetched jobs waiting before it."""
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    system.add_worker(system.leasekeeper, concurrency=1, extra=["--prefetch", "4"])
    system.enqueue_requests(system.task_request(n, tenant="backfill", sleep_ms=1_000)
                            for n in range(8))  # fmt: skip

    def in_hand() -> int:
        snap = system.leasekeeper.snapshot()
        return 0 if snap is None else sum(len(p["leases"]) for p in snap["partitions"])

    wait_until(lambda: in_hand() == 4 and len(system.starts()) >= 1, 60, "four jobs in hand")
    urgent = JobRequest(queue=system.queue, type="task", payload={"n": 99, "sleep_ms": 0},
                        tenant_id="reset", priority="critical")  # fmt: skip
    (critical,) = system.enqueue_requests([urgent])
    wait_until(lambda: critical in {e.job_id for e in system.starts()}, 60, "the critical job")
    order = [e.job_id for e in system.starts()]  # one worker process: its file is in order
    # Claim order would start it fifth at the earliest (index 4), after the jobs in hand.
    assert order.index(critical) <= 2, order
