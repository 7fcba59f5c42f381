"""Per-key ordering in the lease engine (real RocksDB store, injected clock; copies are
taken and delivered by the test as the outbox would)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from jobcore.control import Cancellation
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Grant, SettleKind, Settlement, TopicPart
from leasekeeper.core.retry_policy import Jitter, RetryPolicies, RetryPolicy
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.ordering.values import LaneState, OnDead
from schemas.job import Job
from schemas.vocabulary import DeadLetterReason

TP = TopicPart("jobs.q", 0)
CRITICAL = TopicPart("jobs.q.critical", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def ordered(i: int, key: str | None = "user-42", max_attempts: int = 3) -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, max_attempts=max_attempts, ordering_key=key)  # fmt: skip


def make(tmp_path: Path, clock: Clock, on_dead: OnDead = OnDead.CONTINUE) -> LeaseEngine:
    # No jitter: a full-jitter delay under 1 ms would make a retry due at once on the
    # fixed clock, and nothing would be held behind it (1 run in about 1,000).
    retries = RetryPolicies(default=RetryPolicy(jitter=Jitter.NONE))
    config = EngineConfig(lease_s=10, on_dead=on_dead, retries=retries)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    return engine


def ids(grants: list[Grant]) -> list[str]:
    return [g.lease_id for g in grants]


def settle(engine: LeaseEngine, grant: Grant, outcome: SettleKind = SettleKind.ACK) -> None:
    item = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=outcome,
                      error_class="Boom", message="boom")  # fmt: skip
    assert engine.workers.settle([item])[0].ok


def deliver(engine: LeaseEngine, kind: CopyKind) -> list[CopyRequest]:
    """Deliver every queued copy of ``kind`` (others stay queued)."""
    taken = engine.copies.take()
    chosen = [r for r in taken if r.kind is kind]
    for request in [r for r in taken if r.kind is not kind]:
        engine.copies.add(request)  # back in the queue, still in flight
        engine.copies.dropped(request)  # counted once only
    for request in chosen:
        engine.copies.delivered(request)
    return chosen


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_one_job_per_key_runs_at_a_time_in_order_and_others_pass(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make(tmp_path, clock)
    engine.fetch.offer(TP, 0, ordered(0), b"x")
    engine.fetch.offer(TP, 1, ordered(1), b"x")
    engine.fetch.offer(TP, 2, ordered(2, key=None), b"x")
    engine.fetch.offer(TP, 3, ordered(3, key="user-7"), b"x")
    first = engine.workers.claim("w", 10, wait_s=0)
    assert sorted(ids(first)) == ["jobs.q/0/0", "jobs.q/0/2", "jobs.q/0/3"]
    assert engine.workers.claim("w", 10, wait_s=0) == []  # job 1 waits for job 0
    settle(engine, next(g for g in first if g.lease_id.endswith("/0")))
    assert ids(engine.workers.claim("w", 10, wait_s=0)) == ["jobs.q/0/1"]


def test_a_failing_head_blocks_only_its_key_and_its_followers_leave_the_window(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make(tmp_path, clock)
    for i in range(3):
        engine.fetch.offer(TP, i, ordered(i), b"x")
    engine.fetch.offer(TP, 3, ordered(3, key="user-7"), b"x")
    grants = engine.workers.claim("w", 10, wait_s=0)
    head = next(g for g in grants if g.lease_id.endswith("/0"))
    settle(engine, head, SettleKind.NACK)
    (retry,) = deliver(engine, CopyKind.LANE)
    assert retry.lane is not None and retry.lane.state is LaneState.RETRYING
    assert retry.job is not None and retry.job.ordering_seq == 0  # keeps its place
    engine.fetch.promote_due()  # a loop turn: jobs 1 and 2 are held in the lane
    held = deliver(engine, CopyKind.LANE)
    assert [r.offset for r in held] == [1, 2]
    assert all(r.lane is not None and r.lane.state is LaneState.HELD for r in held)
    # Nothing of the key holds the commit: 0 retried, 1 and 2 held; 3 runs.
    assert engine.commits.commit_positions()[TP][0] == 3
    assert engine.workers.claim("w", 10, wait_s=0) == []
    (blocked,) = engine.ordering.blocked_keys()
    assert (blocked.line.key, blocked.head_seq, blocked.held) == ("user-42", 0, 2)


def test_a_due_head_comes_back_with_its_followers_in_order(tmp_path: Path, clock: Clock) -> None:
    engine = make(tmp_path, clock)
    for i in range(3):
        engine.fetch.offer(TP, i, ordered(i), b"x")
    (head,) = engine.workers.claim("w", 10, wait_s=0)
    settle(engine, head, SettleKind.NACK)
    deliver(engine, CopyKind.LANE)
    engine.fetch.promote_due()
    deliver(engine, CopyKind.LANE)
    clock.now += 3600  # past any backoff
    engine.fetch.promote_due()
    back = deliver(engine, CopyKind.RETURN)
    assert [r.lane.seq for r in back if r.lane] == [0, 1, 2]
    # The copies arrive behind a job enqueued meanwhile; their lane records go first.
    engine.fetch.offer(TP, 3, ordered(3), b"x")
    for offset, request in enumerate(back, start=4):
        assert request.lane is not None
        engine.fetch.offer(TP, offset, request.lane.job, b"x")
    assert engine.workers.claim("w", 10, wait_s=0) == []  # tombstones not durable yet
    assert len(deliver(engine, CopyKind.LANE_DROP)) == 3
    order = []
    for _ in range(4):
        (grant,) = engine.workers.claim("w", 10, wait_s=0)
        order.append(grant.lease_id)
        settle(engine, grant)
    assert order == ["jobs.q/0/4", "jobs.q/0/5", "jobs.q/0/6", "jobs.q/0/3"]


def test_a_dead_head_lets_its_key_go_on_once_the_letter_is_durable(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make(tmp_path, clock)
    engine.fetch.offer(TP, 0, ordered(0, max_attempts=1), b"x")
    engine.fetch.offer(TP, 1, ordered(1), b"x")
    (head,) = engine.workers.claim("w", 10, wait_s=0)
    settle(engine, head, SettleKind.NACK)
    assert engine.workers.claim("w", 10, wait_s=0) == []
    deliver(engine, CopyKind.DEAD)
    assert ids(engine.workers.claim("w", 10, wait_s=0)) == ["jobs.q/0/1"]


def test_with_on_dead_block_a_dead_head_blocks_until_an_operator_skips_it(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make(tmp_path, clock, OnDead.BLOCK)
    engine.fetch.offer(TP, 0, ordered(0, max_attempts=1), b"x")
    engine.fetch.offer(TP, 1, ordered(1), b"x")
    (head,) = engine.workers.claim("w", 10, wait_s=0)
    settle(engine, head, SettleKind.NACK)
    (lane,) = deliver(engine, CopyKind.LANE)
    assert lane.lane is not None and lane.lane.state is LaneState.DEAD
    (letter,) = deliver(engine, CopyKind.DEAD)  # sent once the lane record is durable
    assert letter.offset == 0
    engine.fetch.promote_due()
    deliver(engine, CopyKind.LANE)  # job 1 held
    clock.now += 86_400
    engine.fetch.promote_due()
    assert engine.copies.take() == []  # a dead head never comes back by itself
    (blocked,) = engine.ordering.blocked_keys()
    assert blocked.state is LaneState.DEAD
    engine.ordering.lane_operator(TP, 0, None)  # skipped
    engine.fetch.promote_due()
    (back,) = deliver(engine, CopyKind.RETURN)
    assert back.lane is not None and back.lane.seq == 1


def test_a_key_in_another_class_is_dead_lettered_with_the_reason(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make(tmp_path, clock)
    engine.partitions.assign(CRITICAL, 0)
    engine.fetch.offer(TP, 0, ordered(0), b"x")
    engine.fetch.offer(CRITICAL, 0, replace(ordered(1), priority_class="critical"), b"x")
    (letter,) = deliver(engine, CopyKind.DEAD)
    assert letter.reason is DeadLetterReason.ORDERING_CONFLICT
    assert "another priority class" in letter.detail and "jobs.q" in letter.detail


def test_a_copy_of_a_job_the_lane_holds_is_skipped_after_a_move(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make(tmp_path, clock)
    for i in range(2):
        engine.fetch.offer(TP, i, ordered(i), b"x")
    (head,) = engine.workers.claim("w", 10, wait_s=0)
    settle(engine, head, SettleKind.NACK)
    (retry,) = deliver(engine, CopyKind.LANE)
    assert retry.lane is not None
    # Another leasekeeper takes the partition from offset 0 and reads the lane first.
    other = LeaseEngine(store=LeaseStore(tmp_path / "other"), config=EngineConfig(lease_s=10),
                        clock=clock, monotonic=clock)  # fmt: skip
    other.partitions.assign(TP, 0)
    other.ordering.assign_lines(TP, 2, [retry.lane])
    other.fetch.offer(TP, 0, ordered(0), b"x")  # the original, retried already
    other.fetch.offer(TP, 1, ordered(1), b"x")
    assert other.workers.claim("w", 10, wait_s=0) == []  # 1 waits behind 0, which is out
    assert other.commits.commit_positions()[TP][0] == 1  # 0 skipped as a copy of the lane's


def test_a_held_job_cancelled_meanwhile_lets_its_key_go_on_when_it_comes_back(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make(tmp_path, clock)
    for i in range(3):
        engine.fetch.offer(TP, i, ordered(i), b"x")
    (head,) = engine.workers.claim("w", 10, wait_s=0)
    settle(engine, head, SettleKind.NACK)
    deliver(engine, CopyKind.LANE)
    engine.fetch.promote_due()
    deliver(engine, CopyKind.LANE)  # 1 and 2 held
    engine.control.cancel(Cancellation(job_id="job-1", cancelled_at_ms=0, reason="no longer"))
    clock.now += 3600
    engine.fetch.promote_due()
    back = deliver(engine, CopyKind.RETURN)
    for offset, request in enumerate(back, start=3):
        assert request.lane is not None
        engine.fetch.offer(TP, offset, request.lane.job, b"x")  # job-1's copy is skipped
    assert len(deliver(engine, CopyKind.LANE_DROP)) == 3
    order = []
    while grants := engine.workers.claim("w", 10, wait_s=0):
        (grant,) = grants
        order.append(grant.lease_id)
        settle(engine, grant)
    assert order == ["jobs.q/0/3", "jobs.q/0/5"]
