"""Started-only attempts on a fake clock: a prefetched job that never started gets its
attempt back when its lease expires (a bounded number of times), a started one spends
it, and the refund holds across a restart and a partition move."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from leasekeeper.core.leases import Lease, Pending, SettleKind, Settlement, TopicPart
from leasekeeper.core.offset_metadata import decode as decode_progress
from leasekeeper.core.started_only import StartedOnly
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.store_values import LeaseRecord, leased_value
from leasekeeper.engine import LeaseEngine
from schemas.job_headers import JobHead
from tests.unit.test_engine import TP, Clock, RecordingRouter, job, make_engine


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _lease(*, started: bool) -> Lease:
    pending = Pending(
        tp=TopicPart("jobs.q", 0), offset=0, generation=1, job=JobHead.of(job(0)), envelope=b""
    )
    return Lease(
        pending=pending,
        token="t",
        worker="w",
        attempt=1,
        lease_s=10,
        started_ms=0,
        until_ms=0,
        started_at=0.0,
        deadline=0.0,
        started=started,
    )


def _claimed(engine: LeaseEngine, n: int) -> dict[str, str]:
    grants = engine.workers.claim("w", n, wait_s=0, reports_started=True)
    return {g.lease_id: g.token for g in grants}


def test_only_an_unstarted_lease_with_refunds_left_is_refunded() -> None:
    rule = StartedOnly(max_refunds=1)
    assert rule.refunds(_lease(started=False), refunded_before=0)
    assert not rule.refunds(_lease(started=False), refunded_before=1)
    assert not rule.refunds(_lease(started=True), refunded_before=0)


def test_the_store_keeps_the_started_flag_and_a_plain_lease_is_started(tmp_path: Path) -> None:
    store = LeaseStore(tmp_path)
    batch = store.batch()
    batch.lease("t", 0, 0, leased_value(1, "a", "w", 1, 5, 9, started=False))
    batch.lease("t", 0, 1, leased_value(1, "b", "w", 1, 5, 9))
    store.write(batch)
    leases = store.load("t", 0, 0).leases
    assert (leases[0].started, leases[1].started) == (False, True)
    assert leased_value(1, "b", "w", 1, 5, 9).startswith(b"L")  # as before the flag
    assert LeaseRecord.decode(b'["t", "w", 1, 1, 2]').started  # the layout before that


def test_a_worker_crash_refunds_the_unstarted_job_and_spends_the_started_one(
    tmp_path: Path, clock: Clock
) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    tokens = _claimed(engine, 2)
    assert engine.workers.claim("w", 1, wait_s=0) == []  # attempts are counted at claim
    engine.workers.heartbeat(list(tokens.items()), started=frozenset({"jobs.q/0/0"}))
    clock.now += 11  # the worker died: no heartbeat, no settle
    assert engine.workers.expire() == 1  # one copy: the started job's retry
    ((retry, _),) = router.retries
    assert retry.job_id == "job-0" and retry.attempt == 1
    (again,) = engine.workers.claim("w2", 1, wait_s=0)
    assert again.lease_id == "jobs.q/0/1" and again.attempt == 1  # its attempt back
    assert engine.counters.refunded == 1 and engine.counters.expired == 2


def test_a_job_that_kills_its_worker_before_reporting_still_reaches_the_dlq(
    tmp_path: Path, clock: Clock
) -> None:
    """Poison: it never reports a start; one refund per record, then attempts are spent."""
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    current, crashes = job(0, max_attempts=2), 0
    for offset in range(2):
        engine.fetch.offer(TP, offset, current, b"x")
        for _ in range(2):  # refunded once, then spent
            _claimed(engine, 1)
            clock.now += 11
            engine.workers.expire()
            crashes += 1
        if offset == 0:
            current, delivered = router.retries[-1]
            delivered(True)
    ((dead, reason, _),) = router.deaths
    assert reason == "attempts exhausted" and crashes == 4
    assert [e.attempt for e in dead.errors] == [1, 2]


def test_an_unstarted_lease_is_not_timed_out_and_its_timeout_starts_at_the_start(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    slow = replace(job(0), timeout_s=5)
    engine.fetch.offer(TP, 0, slow, b"x")
    ((lease_id, token),) = _claimed(engine, 1).items()
    for _ in range(3):  # waits 24 s behind other jobs, heartbeated
        clock.now += 8
        engine.workers.heartbeat([(lease_id, token)])
        assert engine.workers.expire() == 0
    engine.workers.heartbeat([(lease_id, token)], started=frozenset({lease_id}))
    clock.now += 8  # within timeout_s + the reaper's 5 s grace
    engine.workers.heartbeat([(lease_id, token)])
    assert engine.workers.expire() == 0
    clock.now += 3
    assert engine.workers.expire() == 1  # past timeout_s + grace since it started


def test_a_refund_holds_across_a_restart_on_the_same_store(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    _claimed(engine, 1)
    engine._store.close()  # the leasekeeper dies too; the lease record says "not started"

    restarted = make_engine(tmp_path, clock, RecordingRouter())
    restarted.partitions.assign(TP, 0)
    restarted.fetch.offer(TP, 0, job(0), b"x")
    clock.now += 11
    assert restarted.workers.expire() == 0 and restarted.counters.refunded == 1
    restarted._store.close()

    again = make_engine(tmp_path, clock, RecordingRouter())
    again.partitions.assign(TP, 0)
    again.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = again.workers.claim("w", 1, wait_s=0, reports_started=True)
    assert grant.attempt == 1  # the refund was stored
    clock.now += 11
    assert again.workers.expire() == 1  # and so was the refund already used: spent now


def test_a_refund_travels_with_the_partition(tmp_path: Path, clock: Clock) -> None:
    first = make_engine(tmp_path / "a", clock, RecordingRouter())
    first.partitions.assign(TP, 0)
    for i in range(2):
        first.fetch.offer(TP, i, job(i), b"x")
    tokens = _claimed(first, 2)
    first.workers.heartbeat(list(tokens.items()), started=frozenset({"jobs.q/0/1"}))
    clock.now += 11
    first.workers.expire()
    first.partitions.begin_revoke({TP})
    offset, metadata = first.commits.commit_positions()[TP]
    # Offset 0's refund is in the hand-over; offset 1 spent its attempt (its retry
    # copy is not delivered yet, so the next owner runs it again as attempt 2).
    assert decode_progress(offset, metadata).claims == {1: 1}

    second = make_engine(tmp_path / "b", clock, RecordingRouter())  # another disk
    second.partitions.assign(TP, offset, metadata)
    for i in range(2):
        second.fetch.offer(TP, i, job(i), b"x")
    grants = second.workers.claim("w2", 2, wait_s=0)
    assert {g.lease_id: g.attempt for g in grants} == {"jobs.q/0/0": 1, "jobs.q/0/1": 2}


def test_an_old_worker_that_reports_no_starts_spends_every_expired_attempt(
    tmp_path: Path, clock: Clock
) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.workers.claim("w", 1, wait_s=0)  # reports_started defaults to False
    clock.now += 11
    assert engine.workers.expire() == 1 and engine.counters.refunded == 0


def test_a_release_still_gives_the_attempt_back(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    ((lease_id, token),) = _claimed(engine, 1).items()
    engine.workers.settle([Settlement(lease_id=lease_id, token=token, outcome=SettleKind.RELEASE)])
    (again,) = engine.workers.claim("w", 1, wait_s=0, reports_started=True)
    assert again.attempt == 1


def test_a_refund_after_a_commit_holds_across_a_restart(tmp_path: Path, clock: Clock) -> None:
    """The commit Kafka holds predates the refund (it says offset 0 used an attempt);
    the store, which wrote that commit and knows of the refund since, wins."""
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    for i in range(2):
        engine.fetch.offer(TP, i, job(i), b"x")
    tokens = _claimed(engine, 2)
    engine.workers.settle(
        [Settlement(lease_id="jobs.q/0/1", token=tokens["jobs.q/0/1"], outcome=SettleKind.ACK)]
    )
    positions = engine.commits.commit_positions()
    engine.commits.committed(positions)
    offset, metadata = positions[TP]
    assert decode_progress(offset, metadata).claims == {0: 1}
    clock.now += 11
    engine.workers.expire()  # offset 0 never started: refunded, then the leasekeeper dies
    assert engine.counters.refunded == 1
    engine._store.close()

    restarted = make_engine(tmp_path, clock, RecordingRouter())
    restarted.partitions.assign(TP, offset, metadata)
    for i in range(2):
        restarted.fetch.offer(TP, i, job(i), b"x")
    (grant,) = restarted.workers.claim("w", 2, wait_s=0, reports_started=True)
    assert grant.lease_id == "jobs.q/0/0" and grant.attempt == 1


def test_a_newer_commit_of_another_owner_still_counts_its_claims(
    tmp_path: Path, clock: Clock
) -> None:
    """The store knows only its own past: a commit it did not write wins where it
    knows more (the partition moved away and back)."""
    engine = make_engine(tmp_path / "a", clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.commits.committed(engine.commits.commit_positions())
    engine.partitions.revoke(TP)

    other = make_engine(tmp_path / "b", clock, RecordingRouter())
    other.partitions.assign(TP, 0)
    other.fetch.offer(TP, 0, job(0), b"x")
    other.workers.claim("w", 1, wait_s=0)
    offset, metadata = other.commits.commit_positions()[TP]

    engine.partitions.assign(TP, offset, metadata)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    assert grant.attempt == 2


def test_claims_inherited_from_a_previous_owner_survive_a_restart_after_our_commit(
    tmp_path: Path, clock: Clock
) -> None:
    """Inherited counts live in our commit's metadata, not in our store: still counted."""
    first = make_engine(tmp_path / "a", clock, RecordingRouter())
    first.partitions.assign(TP, 0)
    first.fetch.offer(TP, 0, job(0), b"x")
    first.workers.claim("w", 1, wait_s=0)
    offset, metadata = first.commits.commit_positions()[TP]

    second = make_engine(tmp_path / "b", clock, RecordingRouter())
    second.partitions.assign(TP, offset, metadata)
    second.commits.committed({TP: (offset, metadata)})  # the same position, accepted as ours
    second._store.close()

    restarted = make_engine(tmp_path / "b", clock, RecordingRouter())
    restarted.partitions.assign(TP, offset, metadata)
    restarted.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = restarted.workers.claim("w", 1, wait_s=0)
    assert grant.attempt == 2


def test_jobs_for_idle_handlers_count_as_started_at_claim(tmp_path: Path, clock: Clock) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    for i in range(3):
        engine.fetch.offer(TP, i, job(i), b"x")
    grants = engine.workers.claim("w", 3, wait_s=0, reports_started=True, start_now=1)
    assert [g.lease_id for g in grants] == ["jobs.q/0/0", "jobs.q/0/1", "jobs.q/0/2"]
    clock.now += 11  # the worker died before it reported anything
    assert engine.workers.expire() == 1  # the job its idle handler took at once: spent
    ((retry, _),) = router.retries
    assert retry.job_id == "job-0"
    again = engine.workers.claim("w2", 3, wait_s=0)
    assert {g.lease_id: g.attempt for g in again} == {"jobs.q/0/1": 1, "jobs.q/0/2": 1}
