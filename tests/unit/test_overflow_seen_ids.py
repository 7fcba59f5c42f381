"""The job ids an overflow reader remembers (to skip a copy made twice after a crash)
are bounded like every map keyed by job id: the recent-keys limit across every
overflow partition owned here, not a window per partition (issue 36 item 5)."""

from __future__ import annotations

from pathlib import Path

from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.recent import RECENT_LIMIT
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.overflow.moves import SEEN_IDS
from schemas.job import Job
from schemas.job_headers import JobHead

OVERFLOW = "jobs.q.overflow"


def copy_of(tp: TopicPart, number: int) -> Pending:
    job = Job(job_id=f"job-{number}", queue="q", tenant_id="flood", type="noop",
              payload=b"", created_at_ms=0, max_attempts=3)  # fmt: skip
    return Pending(tp, number, 0, JobHead.of(job), b"")


def test_overflow_ids_seen_hold_the_recent_limit_across_partitions(tmp_path: Path) -> None:
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=30))
    moves = engine._overflow
    moves.topic = OVERFLOW
    parts = [TopicPart(OVERFLOW, p) for p in range(3)]
    total = 3 * SEEN_IDS
    for number in range(total):
        assert not moves.copied_again(copy_of(parts[number % 3], number))
    assert SEEN_IDS == RECENT_LIMIT
    assert len(moves._seen) == SEEN_IDS

    latest = total - 1
    assert moves.copied_again(copy_of(parts[latest % 3], latest)), "a recent second copy runs"
    assert not moves.copied_again(copy_of(parts[0], 0)), "the oldest ids are forgotten"

    moves.revoke(parts[latest % 3])
    assert all(tp != parts[latest % 3] for tp, _ in moves._seen)
    assert not moves.copied_again(copy_of(parts[latest % 3], latest))


def test_a_copy_on_another_topic_is_never_taken_for_a_second_copy(tmp_path: Path) -> None:
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=30))
    moves = engine._overflow
    moves.topic = OVERFLOW
    ready = TopicPart("jobs.q.ready", 0)
    assert not moves.copied_again(copy_of(ready, 1))
    assert not moves.copied_again(copy_of(ready, 1))
    assert len(moves._seen) == 0
