"""The resolved-job-id window: a copy of a job that already ended here is skipped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobcore.control import DedupeClaim
from leasekeeper.core.copies import CopyKind
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.resolved_ids import ResolvedIds
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job

JOB = Job(job_id="j-1", queue="q", tenant_id="acme", type="noop", payload=b"", created_at_ms=0)


def test_a_job_that_ended_is_known_within_the_window_only() -> None:
    ids = ResolvedIds(window_s=60)
    assert not ids.already_ended("j-1", now_ms=0)
    ids.ended("j-1", at_ms=1_000)
    assert ids.already_ended("j-1", now_ms=61_000)
    assert not ids.already_ended("j-2", now_ms=61_000)
    assert not ids.already_ended("j-1", now_ms=61_001), "forgotten after the window"
    assert len(ids) == 0


def test_memory_is_bounded_the_oldest_going_first() -> None:
    ids = ResolvedIds(max_ids=3)
    for n in range(5):
        ids.ended(f"j-{n}", at_ms=n)
    assert len(ids) == 3
    assert not ids.already_ended("j-1", now_ms=5)
    assert ids.already_ended("j-4", now_ms=5)


def test_zero_ids_turns_it_off_and_negative_settings_are_refused() -> None:
    ids = ResolvedIds(max_ids=0)
    ids.ended("j-1", at_ms=0)
    assert not ids.already_ended("j-1", now_ms=0)
    with pytest.raises(ValueError, match="must be >= 0"):
        ResolvedIds(window_s=-1)


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5)), max_size=200))
def test_never_more_than_max_ids_and_never_older_than_the_window(
    events: list[tuple[int, int]],
) -> None:
    ids = ResolvedIds(max_ids=8, window_s=10)
    now = 0
    for job, step in events:
        now += step * 1000
        ids.ended(str(job), at_ms=now)
        assert len(ids) <= 8
    assert all(not ids.already_ended(str(j), now + 10_001) for j, _ in events)


# -- in the engine: what ends a job, and what a later copy meets -------------------------

TP = TopicPart("jobs.q", 0)
TIER = TopicPart("jobs.q.retry.1s", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def engine(tmp_path: Path) -> LeaseEngine:
    clock = Clock()
    config = EngineConfig(lease_s=10, resolved_window_s=60)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    engine.partitions.assign(TIER, 0)
    return engine


def settle(engine: LeaseEngine, outcome: SettleKind, **fields: Any) -> None:
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle([Settlement(lease_id=grant.lease_id, token=grant.token, outcome=outcome,
                              **fields)])  # fmt: skip


def test_a_copy_of_an_acked_job_is_skipped_and_its_offset_resolved(engine: LeaseEngine) -> None:
    engine.fetch.offer(TP, 0, JOB, b"x")
    settle(engine, SettleKind.ACK)
    engine.fetch.offer(TP, 1, JOB, b"x")  # the relay's second send
    assert engine.workers.claim("w", 1, wait_s=0) == []
    assert engine.counters.resolved_again == 1
    assert engine.commits.commit_positions()[TP][0] == 2, "the commit passes the skipped copy"


def test_a_retry_copy_is_the_job_going_on_and_is_not_skipped(engine: LeaseEngine) -> None:
    engine.fetch.offer(TP, 0, JOB, b"x")
    settle(engine, SettleKind.NACK)
    (retry,) = [c for c in engine.copies.take() if c.kind is CopyKind.RETRY]
    engine.copies.delivered(retry)
    assert retry.job is not None
    engine.fetch.offer(TIER, 0, retry.job, b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    assert grant.lease_id == "jobs.q.retry.1s/0/0" and engine.counters.resolved_again == 0


def test_a_dead_lettered_job_is_not_remembered_so_its_replay_runs(
    engine: LeaseEngine,
) -> None:
    """A replay from the DLQ keeps the job's id, and a record's headers cannot tell it
    from a copy: dead-lettered jobs are not skipped."""
    engine.fetch.offer(TP, 0, JOB, b"x")
    settle(engine, SettleKind.NACK, permanent=True)
    (dead,) = [c for c in engine.copies.take() if c.kind is CopyKind.DEAD]
    engine.copies.delivered(dead)
    engine.fetch.offer(TP, 1, replace(JOB, replay_count=1), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    assert grant.lease_id == "jobs.q/0/1" and engine.counters.resolved_again == 0


def test_a_job_whose_dedupe_key_was_used_counts_as_a_dedupe_skip(engine: LeaseEngine) -> None:
    """The user's dedupe key is checked first and keeps its own meaning and counter."""
    keyed = replace(JOB, dedupe_key="order-1")
    engine.control.remember(DedupeClaim(tenant_id="acme", dedupe_key="order-1", job_id="other",
                                        seen_at_ms=1_000_000_000))  # fmt: skip
    engine.fetch.offer(TP, 0, keyed, b"x")
    assert engine.workers.claim("w", 1, wait_s=0) == []
    assert (engine.counters.deduplicated, engine.counters.resolved_again) == (1, 0)
