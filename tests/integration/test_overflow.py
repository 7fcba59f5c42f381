"""The overflow lane against the real broker (issue 10): a tenant flooding its own
partition does not hold back the other tenants of that partition. Order properties,
never times."""

from __future__ import annotations

import os
import zlib
from collections import Counter
from collections.abc import Iterator

import pytest

from leasekeeper.kafka.consumer_loop import LoopConfig
from leasekeeper.overflow.watch import MAX_COPIES_IN_FLIGHT
from producer.request import JobRequest
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.apps.recording import Event
from tests.system import PARTITIONS, System, wait_until

FLOOD = 3_000
WINDOW = ["--window-records", "200", "--overflow-share", "0.5"]


def partition_of(tenant: str) -> int:
    """Where the producer's partitioner (librdkafka's consistent_random: CRC32 of the
    key) puts a tenant; the tests check it against the topic."""
    return zlib.crc32(tenant.encode()) % PARTITIONS


def neighbours(of: str, count: int) -> list[str]:
    """``count`` tenants that share ``of``'s partition."""
    found = (f"neighbour-{n}" for n in range(10_000))
    return [t for t in found if partition_of(t) == partition_of(of)][:count]


def requests(system: System, tenant: str, count: int, first: int = 0) -> Iterator[JobRequest]:
    for n in range(first, first + count):
        yield JobRequest(queue=system.queue, type="noop", payload={"n": n}, tenant_id=tenant)


def first_starts(events: list[Event]) -> list[str]:
    """Job ids by their first start (a duplicate's later start does not reorder)."""
    seen: dict[str, float] = {}
    for event in sorted(events, key=lambda e: e.at):
        seen.setdefault(event.job_id, event.at)
    return list(seen)


def overflow_copies(system: System) -> Counter[str]:
    """How many times each job was copied to the overflow lane."""
    codec = EnvelopeCodec(SchemaRegistry())
    return Counter(
        codec.decode(m.value()).job_id  # type: ignore[arg-type]
        for m in system.read_topic(system.topics.overflow)
    )


def in_order(started: list[str], expected: list[str]) -> bool:
    position = {job: i for i, job in enumerate(started)}
    return [j for j in expected if j in position] == sorted(
        (j for j in expected if j in position), key=position.__getitem__
    )


def not_run(system: System, jobs: list[str]) -> dict[str, object]:
    """What explains jobs that never ran: which, whether they reached the lane, and
    what the leasekeeper holds."""
    missing = set(jobs) - set(system.acks())
    snapshot = system.leasekeeper.snapshot() or {}
    return {
        "not run": len(missing),
        "first of them (enqueue order)": sorted(jobs.index(j) for j in missing)[:10],
        "of them in the overflow lane": len(missing & set(overflow_copies(system))),
        "committed": system.committed(),
        "end offsets": system.end_offsets(),
        "tenants": snapshot.get("tenants"),
        "partitions": [
            {k: v for k, v in p.items() if k != "leases"} for p in snapshot.get("partitions", [])
        ],
    }


def held_and_fetched(system: System) -> dict[str, object]:
    """Where each partition stands and what the window holds (a stalled read says why)."""
    snapshot = system.leasekeeper.snapshot() or {}
    return {
        "ready": snapshot.get("ready"),
        "tenants": snapshot.get("tenants"),
        "partitions": [
            {k: v for k, v in p.items() if k != "leases"}
            for p in snapshot.get("partitions", [])
            if ".retry." not in p["topic"]
        ],
    }


@pytest.fixture(autouse=True)
def quick_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Noop jobs without their random sleep: the flood drains in seconds. These tests
    are of the leasekeeper's lane, so the producer writes every flood to the ready
    topic (``test_flood_diversion.py`` tests the producer's diversion)."""
    monkeypatch.setitem(os.environ, "RECORDING_MAX_MS", "0")
    monkeypatch.setitem(os.environ, "JOBS_FLOOD_BURST", "0")


def test_the_other_tenants_of_a_flooded_partition_start_before_the_flood_drains(
    system: System,
) -> None:
    others = neighbours("flood", 12)
    flood = system.enqueue_requests(requests(system, "flood", FLOOD))
    behind = system.enqueue_requests(
        JobRequest(queue=system.queue, type="noop", payload={"n": 0}, tenant_id=t) for t in others
    )
    partitions = {m.partition() for m in system.read_topic(system.topics.ready)}
    assert partitions == {partition_of("flood")}, "every tenant shares the flood's partition"

    system.configure(lease_s=30.0, extra=WINDOW)
    system.start(workers=1, concurrency=1)  # one process, one slot: starts are in order
    wait_until(lambda: set(system.acks()) >= set(flood) | set(behind), 120, "everything to run")

    finished = sorted(e.at for e in system.ack_events() if e.job_id in set(flood))
    two_thousandth = finished[1_999]
    late = [e for e in system.starts() if e.job_id in set(behind) and e.at > two_thousandth]
    assert late == [], f"{len(late)} of the other tenants' jobs waited for 2,000 flood jobs"
    assert in_order(first_starts(system.starts()), flood), "the flood started out of order"
    assert sum(overflow_copies(system).values()) > 0, "the flood went through the lane"
    system.wait_caught_up()


def test_kill_9_in_the_middle_of_the_overflow_loses_nothing(system: System) -> None:
    system.configure(lease_s=5.0, extra=WINDOW)
    system.start(workers=1, concurrency=4)
    flood = system.enqueue_requests(requests(system, "flood", FLOOD))

    def moving() -> bool:
        snapshot = system.leasekeeper.snapshot() or {}
        tenants = snapshot.get("tenants") or []
        return any(t["tenant"] == "flood" and t["overflow"] > 0 for t in tenants)

    wait_until(moving, 60, "the flood to move to the overflow lane", step=0.05)
    system.leasekeeper.kill()
    system.restart_leasekeeper()
    wait_until(lambda: set(system.acks()) >= set(flood), 120, "every flood job to run",
               describe=lambda: not_run(system, flood))  # fmt: skip
    system.wait_caught_up()

    copies = overflow_copies(system)
    duplicates = sum(n - 1 for n in copies.values())
    # Copies in flight at the kill, at most: the loop stops fetching a partition with
    # MAX_COPIES_IN_FLIGHT on their way; one fetch (a batch) and one move (the tenant's
    # ready jobs: at most twice the window) come on top.
    bound = MAX_COPIES_IN_FLIGHT + LoopConfig().batch_size + 2 * 200
    starts = Counter(e.job_id for e in system.starts())
    reruns = sum(n - 1 for n in starts.values())
    print(f"kill -9 in the overflow: {len(copies)} jobs moved, {duplicates} copied twice, "
          f"{reruns} started twice")  # fmt: skip
    assert set(copies) <= set(flood)
    assert duplicates <= bound
    # A second copy read by the same leasekeeper is skipped; the rest, and the jobs
    # leased at the kill (4 running, as many prefetched at most), may run twice.
    assert reruns <= duplicates + 2 * 4


def test_a_partition_move_keeps_the_tenant_in_overflow(system: System) -> None:
    """The first owner moves the flood aside and stops; the next owner (another state
    dir) learns from the commit metadata that the tenant is in overflow, so the
    tenant's newer jobs follow the older ones there and do not overtake them."""
    system.configure(lease_s=30.0, extra=WINDOW)
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    older = system.enqueue_requests(requests(system, "flood", FLOOD))
    wait_until(lambda: len(overflow_copies(system)) >= FLOOD, 60, "the whole flood to move")
    system.leasekeeper.stop()  # SIGTERM: commits, with the tenants in overflow

    second = system.new_leasekeeper("lk2", extra=WINDOW)
    system.leasekeepers.append(second)
    second.start().wait_assigned(PARTITIONS)
    # Too few to flood the partition again by themselves: only the entry sends them on.
    newer = system.enqueue_requests(requests(system, "flood", 3, first=FLOOD))
    system.add_worker(second, concurrency=1)
    everything = older + newer
    wait_until(lambda: set(system.acks()) >= set(everything), 120, "every job to run")
    started = first_starts(system.starts())
    assert in_order(started, everything), "newer jobs overtook older ones in the lane"
    assert set(overflow_copies(system)) >= set(newer), "the newer jobs followed into the lane"


def test_the_window_stays_bounded_while_backlogs_move_aside(system: System) -> None:
    """No worker runs: each tenant's backlog is read on and copied to the lane, but the
    window holds no more than with the lane off (its records, plus each partition's
    share), and every job runs once workers come."""
    system.leasekeeper.extra_args += ["--window-records", "100", "--overflow-share", "0.5"]
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    ids = system.enqueue(1_000)

    def moved_aside() -> bool:
        snap = system.leasekeeper.snapshot() or {}
        fetched = sum(
            p["highest_fetched"] + 1
            for p in snap.get("partitions", [])
            if p["topic"] == system.topics.ready and p["highest_fetched"] >= 0
        )
        return fetched >= len(ids)

    wait_until(moved_aside, 60, "every backlog to be read past",
               describe=lambda: held_and_fetched(system))  # fmt: skip
    held = [(system.leasekeeper.snapshot() or {}).get("ready", 0) for _ in range(5)]
    assert max(held) <= 200, held
    system.start(workers=1)
    wait_until(lambda: set(system.acks()) >= set(ids), 120, "the backlog to drain", step=0.25)
    system.wait_caught_up()
