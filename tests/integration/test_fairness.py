"""Fair under floods, against the real broker: order properties, never times (issue 10)."""

from __future__ import annotations

from typing import Any

from tests.system import PARTITIONS, System, wait_until

OTHERS = [f"other-{i}" for i in range(12)]


def ready_by_tenant(system: System) -> dict[str, int]:
    snap: dict[str, Any] | None = system.leasekeeper.snapshot()
    return {} if snap is None else dict(snap["ready_by_tenant"])


def test_a_full_window_lets_a_partition_without_the_flood_fetch(system: System) -> None:
    """One tenant's backlog fills the window; the other partitions' jobs still come in,
    within a fetch, although no worker drains the flood."""
    system.leasekeeper.extra_args += ["--window-records", "100"]
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
