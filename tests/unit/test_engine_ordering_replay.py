"""A dead ordered job replayed from the DLQ (``leasekeeper dlq replay``) is a new job of
its key, at the end of its key's line (docs/ordering.md), under both ``--on-dead``
modes: it neither runs ahead of the key's jobs enqueued before the replay, nor is
taken for the key's dead head and skipped unrun."""

from __future__ import annotations

from pathlib import Path

from jobcore.control import Cancellation
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Grant, SettleKind, Settlement, TopicPart
from leasekeeper.core.retry_policy import Jitter, RetryPolicies, RetryPolicy
from leasekeeper.core.store import LeaseStore
from leasekeeper.dlq.replay import replay_job
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.ordering.values import OnDead
from schemas.job import Job

TP = TopicPart("jobs.q", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def ordered(i: int, max_attempts: int = 3) -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, max_attempts=max_attempts, ordering_key="user-42")  # fmt: skip


def deliver(engine: LeaseEngine, kind: CopyKind) -> list[CopyRequest]:
    """Deliver the copies of ``kind``; any other copy is dropped (its job runs again)."""
    taken = engine.copies.take()
    for request in taken:
        if request.kind is not kind:
            engine.copies.add(request)
            engine.copies.dropped(request)
    chosen = [r for r in taken if r.kind is kind]
    for request in chosen:
        engine.copies.delivered(request)
    return chosen


def settle(engine: LeaseEngine, grant: Grant, outcome: SettleKind) -> None:
    settlement = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=outcome,
                            error_class="Boom", message="boom")  # fmt: skip
    assert engine.workers.settle([settlement])[0].ok


def killed_twice(tmp_path: Path, mode: OnDead) -> tuple[LeaseEngine, Clock, Job]:
    """Job 0 of the key fails, goes through the lane once, fails again and dies."""
    clock = Clock()
    retries = RetryPolicies(default=RetryPolicy(jitter=Jitter.NONE))
    config = EngineConfig(lease_s=10, on_dead=mode, retries=retries)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, ordered(0, max_attempts=2), b"x")
    (grant,) = engine.workers.claim("w", 10, 0)
    settle(engine, grant, SettleKind.NACK)
    deliver(engine, CopyKind.LANE)
    clock.now += 3600
    engine.fetch.promote_due()
    (back,) = deliver(engine, CopyKind.RETURN)
    assert back.lane is not None
    engine.fetch.offer(TP, 1, back.lane.job, b"x")
    deliver(engine, CopyKind.LANE_DROP)
    engine.fetch.promote_due()
    (grant,) = engine.workers.claim("w", 10, 0)
    settle(engine, grant, SettleKind.NACK)
    if mode is OnDead.BLOCK:
        deliver(engine, CopyKind.LANE)  # the key's dead head, blocking it
    (dead,) = deliver(engine, CopyKind.DEAD)
    assert dead.job is not None and dead.job.ordering_seq == 0, "it kept its first place"
    return engine, clock, dead.job


def test_under_continue_a_replay_runs_after_the_jobs_of_its_key_enqueued_before_it(
    tmp_path: Path,
) -> None:
    engine, _, dead = killed_twice(tmp_path, OnDead.CONTINUE)
    for i in (2, 3, 4):
        engine.fetch.offer(TP, i, ordered(i), b"x")
    engine.fetch.promote_due()
    (grant,) = engine.workers.claim("w", 10, 0)
    started = [grant.lease_id]
    engine.fetch.offer(TP, 5, replay_job(dead, now_ms=0), b"x")  # the replay lands at offset 5
    settle(engine, grant, SettleKind.ACK)
    for _ in range(4):
        engine.fetch.promote_due()
        grants = engine.workers.claim("w", 10, 0)
        if not grants:
            break
        started.append(grants[0].lease_id)
        settle(engine, grants[0], SettleKind.ACK)
    assert started == ["jobs.q/0/2", "jobs.q/0/3", "jobs.q/0/4", "jobs.q/0/5"]


def test_under_block_a_replay_waits_in_its_key_line_and_is_not_skipped(tmp_path: Path) -> None:
    engine, _, dead = killed_twice(tmp_path, OnDead.BLOCK)
    skipped = engine.counters.skipped
    engine.fetch.offer(TP, 2, replay_job(dead, now_ms=0), b"x")
    engine.fetch.promote_due()
    assert engine.counters.skipped == skipped, "not taken for the key's dead head"
    assert engine.workers.claim("w", 10, 0) == [], "the key is blocked: it waits behind its head"
    (waiting,) = deliver(engine, CopyKind.LANE)
    assert waiting.job is not None and waiting.job.job_id == "job-0"
    assert waiting.job.replay_count == dead.replay_count + 1, "the replay itself waits"


def test_a_line_whose_copy_back_is_skipped_when_fetched_is_forgotten(tmp_path: Path) -> None:
    """A job copied back from the lane and skipped when fetched (cancelled meanwhile)
    leaves its line empty: it must not stay in memory for good."""
    clock = Clock()
    retries = RetryPolicies(default=RetryPolicy(jitter=Jitter.NONE))
    config = EngineConfig(lease_s=10, retries=retries)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, ordered(0), b"x")
    (grant,) = engine.workers.claim("w", 10, 0)
    settle(engine, grant, SettleKind.NACK)
    deliver(engine, CopyKind.LANE)
    clock.now += 3600
    engine.fetch.promote_due()
    (back,) = deliver(engine, CopyKind.RETURN)  # back in the class topic
    engine.control.cancel(Cancellation(job_id="job-0", cancelled_at_ms=0))
    assert back.lane is not None
    engine.fetch.offer(TP, 1, back.lane.job, b"x")  # fetched and skipped: cancelled
    deliver(engine, CopyKind.LANE_DROP)
    engine.fetch.promote_due()
    assert engine._ordering.keys._lines == {}
