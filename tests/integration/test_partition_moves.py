"""A partition that moves twice in a row keeps what its first owner acked (duplicates stay bounded).

The commit offset stops at the lowest unresolved job; everything acked beyond it
travels in the commit metadata. The second owner must hand that inherited
progress on even for offsets it has not fetched yet, or the third owner runs
those acked jobs again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobcore.kafka import KafkaSettings
from tests.system import Leasekeeper, System, wait_until

STUCK = 12  # jobs still leased when the first owner lets go: they hold the commit back
ACKED = 300  # jobs acked beyond them by the first owner
# The second owner fetches fewer records than the stuck jobs, so it never reaches
# the acked ones before it moves the partition on.
SECOND_WINDOW = 5
MOVE = ["--drain-grace", "1", "--session-timeout-ms", "6000"]


@pytest.fixture
def one_partition(kafka: KafkaSettings, unique: str, tmp_path: Path) -> Iterator[System]:
    """A one-partition queue: a move takes the whole queue, so the owner is never in doubt."""
    sut = System(kafka, unique, tmp_path, partitions=1)
    yield sut
    sut.stop()


def take_over(system: System, name: str, extra: list[str] | None = None) -> Leasekeeper:
    """Start leasekeeper ``name`` and wait until it owns the partition."""
    owner = system.new_leasekeeper(name, extra=[*MOVE, *(extra or [])])
    system.leasekeepers.append(owner)
    owner.start().wait_assigned(1)
    return owner


@pytest.mark.slow
def test_two_partition_moves_in_a_row_rerun_no_acked_job(one_partition: System) -> None:
    system = one_partition
    first = take_over(system, "first")
    worker = system.add_worker(first, concurrency=STUCK + 8)
    stuck = system.enqueue_tasks(STUCK, hang_attempts=1, timeout_s=600)
    acked = system.enqueue(ACKED)
    wait_until(lambda: system.acks() >= set(acked), 60, "the first owner to ack the noop jobs")
    assert len({e.job_id for e in system.starts()} & set(stuck)) == STUCK

    worker.kill()  # the stuck jobs stay leased: the commit cannot pass them
    first.stop()
    second = take_over(system, "second", extra=["--window-records", str(SECOND_WINDOW)])
    wait_until(lambda: fetched(second, system) > 0, 30, "the second owner to fetch")
    second.stop()  # commits what it knows and lets go, having fetched only stuck jobs

    third = take_over(system, "third")
    system.add_worker(third, concurrency=8)
    wait_until(lambda: system.acks() >= set(stuck), 60, "the stuck jobs to run again")
    system.wait_caught_up(60)

    starts = Counter(e.job_id for e in system.starts())
    ran_again = sorted(job for job in acked if starts[job] > 1)
    print(f"two moves: {len(ran_again)} of {ACKED} acked jobs ran again")
    assert ran_again == [], f"{len(ran_again)} jobs acked by the first owner ran again"
    assert all(starts[job] == 2 for job in stuck)


def fetched(leasekeeper: Leasekeeper, system: System) -> int:
    """How many records of the ready partition ``leasekeeper`` fetched beyond the commit
    it started from (its retry-tier partitions are left out)."""
    snapshot = leasekeeper.snapshot()
    ready = [p for p in (snapshot or {}).get("partitions", []) if p["topic"] == system.topics.ready]
    if not ready:
        return 0
    (partition,) = ready
    return int(partition["highest_fetched"]) + 1 - max(int(partition["committed"]), 0)
