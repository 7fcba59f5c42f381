"""The lease engine with a real RocksDB store, a recording router and an injected clock."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from jobcore.control import Cancellation, DedupeClaim
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.offset_metadata import decode as decode_progress
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job

TP = TopicPart("jobs.q", 0)
Done = Callable[[bool], None]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class RecordingRouter:
    """Takes the engine's copy requests as the outbox would; a test delivers them."""

    def __init__(self) -> None:
        self.engine: LeaseEngine | None = None
        self._taken: list[CopyRequest] = []

    def _of(self, kind: CopyKind) -> list[CopyRequest]:
        assert self.engine is not None
        self._taken.extend(self.engine.copies.take())
        return [r for r in self._taken if r.kind is kind]

    def _done(self, request: CopyRequest) -> Done:
        def done(ok: bool) -> None:
            assert self.engine is not None
            if ok:  # a failed delivery stays with the outbox, which sends it again
                self.engine.copies.delivered(request)

        return done

    @property
    def retries(self) -> list[tuple[Job, Done]]:
        return [(r.job, self._done(r)) for r in self._of(CopyKind.RETRY) if r.job]

    @property
    def delays(self) -> list[float]:
        return [r.delay_s for r in self._of(CopyKind.RETRY)]

    @property
    def deaths(self) -> list[tuple[Job, str, Done]]:
        return [(r.job, r.reason, self._done(r)) for r in self._of(CopyKind.DEAD) if r.job]

    @property
    def claims(self) -> list[tuple[DedupeClaim, Done]]:
        return [(r.claim, self._done(r)) for r in self._of(CopyKind.DEDUPE_CLAIM) if r.claim]


def job(i: int, tenant: str = "t1", max_attempts: int = 3) -> Job:
    return Job(
        job_id=f"job-{i}",
        queue="q",
        tenant_id=tenant,
        type="noop",
        payload=b"",
        created_at_ms=0,
        max_attempts=max_attempts,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_engine(path: Path, clock: Clock, router: RecordingRouter, **cfg: int) -> LeaseEngine:
    config = EngineConfig(lease_s=10, **cfg)  # type: ignore[arg-type]
    engine = LeaseEngine(store=LeaseStore(path), config=config, clock=clock, monotonic=clock)
    router.engine = engine
    return engine


def ack(grant_lease: str, token: str) -> Settlement:
    return Settlement(lease_id=grant_lease, token=token, outcome=SettleKind.ACK)


def test_claims_round_robin_across_tenants(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, -1001)
    for i in range(5):
        engine.fetch.offer(TP, i, job(i, "noisy"), b"x")
    engine.fetch.offer(TP, 5, job(5, "quiet"), b"x")
    grants = engine.workers.claim("w", 2, wait_s=0)
    assert {g.lease_id for g in grants} == {"jobs.q/0/0", "jobs.q/0/5"}
    assert all(g.attempt == 1 for g in grants)


def test_commit_waits_for_the_lowest_unresolved_offset(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, -1001)
    for i in range(3):
        engine.fetch.offer(TP, i, job(i), b"x")
    grants = engine.workers.claim("w", 3, wait_s=0)
    engine.workers.settle([ack(grants[2].lease_id, grants[2].token)])
    engine.workers.settle([ack(grants[1].lease_id, grants[1].token)])
    offset, metadata = engine.commits.commit_positions()[TP]
    assert offset == 0
    assert decode_progress(0, metadata).resolved == {1, 2}
    engine.workers.settle([ack(grants[0].lease_id, grants[0].token)])
    assert engine.commits.commit_positions() == {TP: (3, "")}


def test_stale_tokens_are_rejected_and_counted(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    assert not engine.workers.heartbeat([(grant.lease_id, "forged")])[0].ok
    answer = engine.workers.settle([ack(grant.lease_id, "forged")])[0]
    assert not answer.ok and answer.reason == "stale token"
    assert engine.counters.stale_rejected == 2
    assert engine.workers.heartbeat([(grant.lease_id, grant.token)])[0].ok
    assert engine.workers.settle([ack(grant.lease_id, grant.token)])[0].ok


def test_nack_resolves_only_once_the_retry_copy_is_delivered(tmp_path: Path, clock: Clock) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    nack = Settlement(
        lease_id=grant.lease_id,
        token=grant.token,
        outcome=SettleKind.NACK,
        error_class="TimeoutError",
        message="partner API timed out",
    )
    assert engine.workers.settle([nack])[0].ok
    ((copy, on_done),) = router.retries
    assert copy.attempt == 1
    assert [(e.error_class, e.worker) for e in copy.errors] == [("TimeoutError", "w")]
    assert engine.commits.commit_positions()[TP][0] == 0
    on_done(True)
    assert engine.commits.commit_positions() == {TP: (1, "")}


def test_an_undelivered_copy_stays_in_flight_and_the_job_is_not_run_again(
    tmp_path: Path, clock: Clock
) -> None:
    """The outbox sends a failed copy again; the engine neither resolves nor re-runs it."""
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle(
        [Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK)]
    )
    router.retries[0][1](False)
    assert engine.workers.claim("w", 1, wait_s=0) == []
    assert engine.partitions.in_flight({TP}) == 1
    assert engine.commits.commit_positions()[TP][0] == 0


def test_permanent_and_exhausted_failures_go_to_the_dlq(tmp_path: Path, clock: Clock) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1, max_attempts=1), b"x")
    g0, g1 = engine.workers.claim("w", 2, wait_s=0)
    engine.workers.settle(
        [
            Settlement(
                lease_id=g0.lease_id, token=g0.token, outcome=SettleKind.NACK, permanent=True
            ),
            Settlement(lease_id=g1.lease_id, token=g1.token, outcome=SettleKind.NACK),
        ]
    )
    assert [reason for _, reason, _ in router.deaths] == ["permanent error", "attempts exhausted"]
    assert router.retries == []


def test_release_gives_the_attempt_back(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle(
        [Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.RELEASE)]
    )
    (again,) = engine.workers.claim("w2", 1, wait_s=0)
    assert again.attempt == 1 and again.token != grant.token


def test_expired_lease_is_a_failed_attempt(tmp_path: Path, clock: Clock) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    clock.now += 5
    assert engine.workers.expire() == 0
    engine.workers.heartbeat([(grant.lease_id, grant.token)])  # extends to now + 10
    clock.now += 9
    assert engine.workers.expire() == 0
    clock.now += 2
    assert engine.workers.expire() == 1
    assert router.retries[0][0].errors[0].error_class == "LeaseExpired"
    late = engine.workers.settle([ack(grant.lease_id, grant.token)])[0]
    assert not late.ok


def test_restart_on_the_same_store_skips_acked_jobs(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    for i in range(3):
        engine.fetch.offer(TP, i, job(i), b"x")
    grants = engine.workers.claim("w", 3, wait_s=0)
    engine.workers.settle([ack(grants[1].lease_id, grants[1].token)])
    engine._store.close()  # the process dies; Kafka still has offset 0 committed

    router = RecordingRouter()
    restarted = make_engine(tmp_path, clock, router)
    restarted.partitions.assign(TP, 0)
    for i in range(3):
        restarted.fetch.offer(TP, i, job(i), b"x")
    assert restarted.workers.claim("w", 3, wait_s=0) == []  # 0 and 2 are still leased
    clock.now += 11
    assert restarted.workers.expire() == 2
    assert sorted(copy.job_id for copy, _ in router.retries) == ["job-0", "job-2"]
    assert all(copy.attempt == 1 for copy, _ in router.retries)


def test_a_job_whose_worker_dies_every_time_reaches_the_dlq_with_every_attempt(
    tmp_path: Path, clock: Clock
) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    current = job(0, max_attempts=3)
    for offset in range(3):
        engine.fetch.offer(TP, offset, current, b"x")
        (grant,) = engine.workers.claim("w", 1, wait_s=0)
        assert grant.attempt == offset + 1
        clock.now += 11  # the worker died: no heartbeat, no settle
        engine.workers.expire()
        if offset < 2:
            current, delivered = router.retries[-1]
            delivered(True)
    ((dead, reason, _),) = router.deaths
    assert reason == "attempts exhausted"
    assert [e.attempt for e in dead.errors] == [1, 2, 3]
    assert {e.error_class for e in dead.errors} == {"LeaseExpired"}


def test_claims_counted_without_a_settlement_dead_letter_at_claim(
    tmp_path: Path, clock: Clock
) -> None:
    """Claim counts alone (no lease record left) still stop a job at max_attempts."""
    router = RecordingRouter()
    store = LeaseStore(tmp_path)
    batch = store.batch()
    batch.claims(TP.topic, TP.partition, 0, 3)
    store.write(batch)
    store.close()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0, max_attempts=3), b"x")
    assert engine.workers.claim("w", 1, wait_s=0) == []
    assert [reason for _, reason, _ in router.deaths] == ["attempts exhausted"]


def test_window_fills_by_records(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter(), window_records=2)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    assert engine.fetch.window_room() > 0
    engine.fetch.offer(TP, 1, job(1), b"x")
    assert engine.fetch.window_room() == 0
    engine.workers.claim("w", 1, wait_s=0)
    assert engine.fetch.window_room() > 0


def test_revoked_partition_leases_become_unknown(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.partitions.revoke(TP)
    assert not engine.workers.settle([ack(grant.lease_id, grant.token)])[0].ok
    assert engine.workers.claim("w", 1, wait_s=0) == []


def test_a_lease_survives_a_leasekeeper_restart_until_it_expires(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    g0, _g1 = engine.workers.claim("w", 2, wait_s=0)
    engine._store.close()

    router = RecordingRouter()
    restarted = make_engine(tmp_path, clock, router)
    restarted.partitions.assign(TP, 0)
    restarted.fetch.offer(TP, 0, job(0), b"x")
    restarted.fetch.offer(TP, 1, job(1), b"x")
    assert restarted.workers.claim("w", 2, wait_s=0) == []  # both still leased
    # The worker that held job 0 acks it with its old token: accepted.
    assert restarted.workers.settle([ack(g0.lease_id, g0.token)])[0].ok
    # Job 1's worker is gone: after lease_until the reaper takes it back.
    clock.now += 11
    assert restarted.workers.expire() == 1
    assert router.retries[0][0].errors[0].error_class == "LeaseExpired"


def test_an_ack_whose_answer_a_restart_lost_is_answered_as_applied(
    tmp_path: Path, clock: Clock
) -> None:
    """The ack is stored, then the leasekeeper dies before its answer reaches the
    worker, which sends it again to the restarted one: applied once, answered as
    applied (else the worker reports a job that ran and was acked as refused). The
    same lease with another token, or a nack, is still refused."""
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    g0, g1 = engine.workers.claim("w", 2, wait_s=0)
    assert engine.workers.settle([ack(g0.lease_id, g0.token), ack(g1.lease_id, g1.token)])[0].ok
    engine._store.close()

    restarted = make_engine(tmp_path, clock, RecordingRouter())
    restarted.partitions.assign(TP, 0)
    restarted.fetch.offer(TP, 0, job(0), b"x")
    restarted.fetch.offer(TP, 1, job(1), b"x")
    assert restarted.workers.claim("w", 2, wait_s=0) == []  # acked: skipped, not run again
    again = restarted.workers.settle([ack(g0.lease_id, g0.token)])[0]
    assert again.ok and again.reason == "already settled"
    assert not restarted.workers.settle([ack(g1.lease_id, "not-the-token")])[0].ok
    nack = Settlement(lease_id=g1.lease_id, token=g1.token, outcome=SettleKind.NACK)
    assert not restarted.workers.settle([nack])[0].ok


def test_a_moved_partition_keeps_resolved_offsets_and_attempts_via_commit_metadata(
    tmp_path: Path, clock: Clock
) -> None:
    first = make_engine(tmp_path / "a", clock, RecordingRouter())
    first.partitions.assign(TP, 0)
    for i in range(4):
        first.fetch.offer(TP, i, job(i), b"x")
    grants = {g.lease_id: g for g in first.workers.claim("w", 4, wait_s=0)}
    first.workers.settle([ack("jobs.q/0/1", grants["jobs.q/0/1"].token)])
    first.workers.settle([ack("jobs.q/0/3", grants["jobs.q/0/3"].token)])
    first.partitions.begin_revoke({TP})
    offset, metadata = first.commits.commit_positions()[TP]
    assert offset == 0

    second = make_engine(tmp_path / "b", clock, RecordingRouter())  # another disk
    second.partitions.assign(TP, offset, metadata)
    for i in range(4):
        second.fetch.offer(TP, i, job(i), b"x")
    again = second.workers.claim("w2", 4, wait_s=0)
    assert sorted(g.lease_id for g in again) == ["jobs.q/0/0", "jobs.q/0/2"]
    assert {g.attempt for g in again} == {2}  # the first owner's claims count


def test_a_draining_partition_dispatches_nothing_but_accepts_acks(
    tmp_path: Path, clock: Clock
) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.partitions.begin_revoke({TP})
    assert engine.workers.claim("w", 1, wait_s=0) == []
    assert engine.partitions.in_flight({TP}) == 1
    assert engine.workers.settle([ack(grant.lease_id, grant.token)])[0].ok
    assert engine.partitions.in_flight({TP}) == 0


def test_the_reaper_takes_back_a_job_running_past_its_timeout(tmp_path: Path, clock: Clock) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    slow = Job(job_id="slow", queue="q", tenant_id="t", type="noop", payload=b"",
               created_at_ms=0, timeout_s=20)  # fmt: skip
    engine.fetch.offer(TP, 0, slow, b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    for _ in range(6):  # heartbeats keep the lease, but not past timeout_s + grace
        clock.now += 5
        engine.workers.heartbeat([(grant.lease_id, grant.token)])
        engine.workers.expire()
    assert router.retries[0][0].errors[-1].error_class == "JobTimeout"


def test_lease_length_is_configurable_per_job_type(tmp_path: Path, clock: Clock) -> None:
    config = EngineConfig(lease_s=10, lease_s_by_type={"report": 600})
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock,
                         monotonic=clock)  # fmt: skip
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, Job(job_id="r", queue="q", tenant_id="t2", type="report", payload=b"",
                            created_at_ms=0), b"x")  # fmt: skip
    leases = {g.lease_id: g.lease_s for g in engine.workers.claim("w", 2, wait_s=0)}
    assert leases == {"jobs.q/0/0": 10, "jobs.q/0/1": 600}


def test_a_failed_job_waits_its_jittered_backoff_and_retry_after_wins(
    tmp_path: Path, clock: Clock
) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    g0, g1 = engine.workers.claim("w", 2, wait_s=0)
    engine.workers.settle([
        Settlement(lease_id=g0.lease_id, token=g0.token, outcome=SettleKind.NACK),
        Settlement(lease_id=g1.lease_id, token=g1.token, outcome=SettleKind.NACK, retry_after_s=42),
    ])  # fmt: skip
    backoff, retry_after = router.delays
    assert 0 <= backoff <= 2.0  # full jitter after attempt 1: uniform(0, base * 2)
    assert retry_after == 42
    (copy0, _), (copy1, _) = router.retries
    assert copy1.run_at_ms == int(clock.now * 1000) + 42_000
    assert copy0.run_at_ms == int(clock.now * 1000) + int(backoff * 1000)


def keyed(i: int, key: str) -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, dedupe_key=key)  # fmt: skip


def test_a_cancelled_job_is_skipped_wherever_it_waits(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.control.cancel(Cancellation(job_id="job-0", cancelled_at_ms=0))
    engine.fetch.offer(TP, 0, job(0), b"x")  # cancelled before it was fetched
    engine.fetch.offer(TP, 1, job(1), b"x")
    engine.fetch.offer(TP, 2, job(2), b"x")
    engine.control.cancel(Cancellation(job_id="job-1", cancelled_at_ms=0))  # while ready
    (grant,) = engine.workers.claim("w", 3, wait_s=0)
    assert grant.lease_id == "jobs.q/0/2"
    engine.control.cancel(Cancellation(job_id="job-2", cancelled_at_ms=0))  # while running
    answer = engine.workers.heartbeat([(grant.lease_id, grant.token)])[0]
    assert (answer.ok, answer.reason) == (False, "cancelled")
    assert engine.counters.cancelled == 3
    assert engine.commits.commit_positions()[TP][0] == 3
    assert engine.views.job_view("job-1")["state"] == "cancelled"


def test_a_second_job_with_a_claimed_dedupe_key_is_skipped(tmp_path: Path, clock: Clock) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, keyed(0, "receipt:42"), b"x")
    assert engine.workers.claim("w", 1, wait_s=0) == []  # waits for its key's claim to be durable
    engine.fetch.offer(TP, 1, keyed(1, "receipt:42"), b"x")
    ((claim, delivered),) = router.claims
    assert (claim.dedupe_key, claim.job_id) == ("receipt:42", "job-0")
    delivered(True)
    (grant,) = engine.workers.claim("w", 2, wait_s=0)
    assert grant.lease_id == "jobs.q/0/0"
    assert engine.counters.deduplicated == 1


def test_a_dedupe_key_read_from_kafka_survives_a_restart(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.control.remember(DedupeClaim(tenant_id="t1", dedupe_key="k", job_id="job-0",
                                        seen_at_ms=int(clock.now * 1000)))  # fmt: skip
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 5, keyed(5, "k"), b"x")
    assert engine.workers.claim("w", 1, wait_s=0) == []
    assert engine.counters.deduplicated == 1
    clock.now += 2 * 86_400  # past the dedupe window: the key is free again
    engine.fetch.offer(TP, 6, keyed(6, "k"), b"x")
    assert engine.counters.deduplicated == 1


def test_inherited_progress_survives_the_new_owners_first_commit(
    tmp_path: Path, clock: Clock
) -> None:
    from leasekeeper.core.offset_metadata import Progress
    from leasekeeper.core.offset_metadata import encode as encode_progress

    inherited = encode_progress(100, Progress(resolved=frozenset(range(105, 111)), claims={}))
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 100, inherited)
    committed = (100, inherited)

    def commit() -> tuple[int, str]:
        positions = engine.commits.commit_positions()
        engine.commits.committed(positions)
        return positions.get(TP, committed)

    # Nothing fetched yet: the commit ~100 ms after the assignment must keep the set.
    committed = commit()
    assert committed[0] == 100
    assert decode_progress(100, committed[1]).resolved == set(range(105, 111))
    # Halfway through the refetch, the commit still carries what is not fetched yet.
    for i in range(100, 107):
        engine.fetch.offer(TP, i, job(i), b"x")
    committed = commit()
    assert committed[0] == 100
    assert decode_progress(100, committed[1]).resolved == set(range(105, 111))


def test_a_second_move_does_not_rerun_jobs_acked_beyond_the_commit(
    tmp_path: Path, clock: Clock
) -> None:
    first = make_engine(tmp_path / "a", clock, RecordingRouter())
    first.partitions.assign(TP, 0)
    for i in range(4):
        first.fetch.offer(TP, i, job(i), b"x")
    grants = {g.lease_id: g for g in first.workers.claim("w", 4, wait_s=0)}
    first.workers.settle([ack(f"jobs.q/0/{i}", grants[f"jobs.q/0/{i}"].token) for i in (0, 3)])
    first.partitions.begin_revoke({TP})
    offset, metadata = first.commits.commit_positions()[TP]
    assert offset == 1

    # The second owner commits before it fetches anything, then loses the partition.
    second = make_engine(tmp_path / "b", clock, RecordingRouter())
    second.partitions.assign(TP, offset, metadata)
    positions = second.commits.commit_positions()
    second.commits.committed(positions)
    offset, metadata = positions.get(TP, (offset, metadata))

    third = make_engine(tmp_path / "c", clock, RecordingRouter())
    third.partitions.assign(TP, offset, metadata)
    for i in range(1, 4):
        third.fetch.offer(TP, i, job(i), b"x")
    again = third.workers.claim("w3", 4, wait_s=0)
    assert sorted(g.lease_id for g in again) == ["jobs.q/0/1", "jobs.q/0/2"]


def test_refused_metadata_shrinks_to_fit_then_to_none(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    for i in range(0, 3000):
        engine.fetch.offer(TP, i, job(i), b"x")
    grants = engine.workers.claim("w", 3000, wait_s=0)
    # Every third job acked: a bitmap that compresses badly, beyond a held head.
    engine.workers.settle([ack(g.lease_id, g.token) for g in grants[1::3]])
    offset, metadata = engine.commits.commit_positions()[TP]
    assert offset == 0 and len(metadata) > 64
    sizes = [len(metadata)]
    while sizes[-1]:
        shrunk = engine.commits.shrink_metadata(TP)
        assert shrunk is not None and shrunk[0] == 0
        assert len(shrunk[1]) < sizes[-1]
        sizes.append(len(shrunk[1]))
    assert sizes[-1] == 0
    # A partition assigned later starts from the limit the broker accepted.
    other = TopicPart("jobs.q", 1)
    engine.partitions.assign(other, 0)
    assert engine.commits.shrink_metadata(other) == (0, "")


def test_a_settlement_sent_again_is_answered_as_applied(tmp_path: Path, clock: Clock) -> None:
    engine = make_engine(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    (first,) = engine.workers.settle([ack(grant.lease_id, grant.token)])
    # The answer was lost to an RPC deadline; the worker sends the same ack again.
    (again,) = engine.workers.settle([ack(grant.lease_id, grant.token)])
    assert first.ok and again.ok
    assert engine.counters.acked == 1 and engine.counters.stale_rejected == 0
    # Another token for the same lease is still a zombie's, and refused.
    (zombie,) = engine.workers.settle([ack(grant.lease_id, "not-the-token")])
    assert not zombie.ok and engine.counters.stale_rejected == 1


def test_a_wall_clock_step_expires_no_lease(tmp_path: Path) -> None:
    wall, mono = Clock(), Clock()
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                         clock=wall, monotonic=mono)  # fmt: skip
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    wall.now += 3600  # NTP, or a VM that was suspended
    assert engine.workers.expire() == 0
    assert engine.workers.heartbeat([(grant.lease_id, grant.token)])[0].ok
    mono.now += 11  # the worker really went quiet for longer than the lease
    assert engine.workers.expire() == 1


def test_a_restart_turns_stored_epoch_deadlines_into_monotonic_ones(tmp_path: Path) -> None:
    wall, mono = Clock(), Clock()

    def engine(m: Clock) -> LeaseEngine:
        return LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                           clock=wall, monotonic=m)  # fmt: skip

    first = engine(mono)
    first.partitions.assign(TP, 0)
    first.fetch.offer(TP, 0, job(0), b"x")
    first.workers.claim("w", 1, wait_s=0)
    first._store.close()
    wall.now += 4
    restarted_mono = Clock()
    restarted_mono.now = 5.0  # a new process: its monotonic clock has another origin
    second = engine(restarted_mono)
    second.partitions.assign(TP, 0)
    second.fetch.offer(TP, 0, job(0), b"x")
    restarted_mono.now += 5  # 9 s of the 10 s lease used
    assert second.workers.expire() == 0
    restarted_mono.now += 2
    assert second.workers.expire() == 1


def test_error_messages_and_tracebacks_in_the_history_are_capped(
    tmp_path: Path, clock: Clock
) -> None:
    """A handler's megabyte message must not make every later copy of the job too large."""
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    huge = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK,
                      message="m" * 1_000_000, traceback="t" * 999_999 + "raise")  # fmt: skip
    engine.workers.settle([huge])
    ((copy, _),) = router.retries
    (error,) = copy.errors
    assert 0 < len(error.message) <= 2000
    assert 0 < len(error.traceback) <= 4000 and error.traceback.endswith("raise")


def test_leasing_stops_while_finished_jobs_wait_for_a_commit_kafka_takes(
    tmp_path: Path, clock: Clock
) -> None:
    """While commits fail (the group coordinator is down), every finished job is one a
    partition move would run again: past ``max_uncommitted`` of them nothing new is
    leased, and the first accepted commit lets leasing go on."""
    engine = make_engine(tmp_path, clock, RecordingRouter(), max_uncommitted=3)
    engine.partitions.assign(TP, 0)
    for i in range(6):
        engine.fetch.offer(TP, i, job(i), b"x")
    grants = engine.workers.claim("w", 3, wait_s=0)
    engine.workers.settle([ack(g.lease_id, g.token) for g in grants])
    assert engine.workers.claim("w", 3, wait_s=0) == []
    assert engine.views.snapshot().partitions[0].uncommitted == 3

    failed = engine.commits.commit_positions()  # sent, never accepted
    assert failed == {TP: (3, "")}
    assert engine.workers.claim("w", 3, wait_s=0) == []
    engine.commits.committed(engine.commits.commit_positions() or failed)
    assert [g.lease_id for g in engine.workers.claim("w", 3, wait_s=0)] == [
        "jobs.q/0/3",
        "jobs.q/0/4",
        "jobs.q/0/5",
    ]


def test_an_accepted_commit_counts_only_what_it_describes(tmp_path: Path, clock: Clock) -> None:
    """Jobs finished after a commit was sent are not made safe by its answer."""
    engine = make_engine(tmp_path, clock, RecordingRouter(), max_uncommitted=2)
    engine.partitions.assign(TP, 0)
    for i in range(5):
        engine.fetch.offer(TP, i, job(i), b"x")
    first, second, third = engine.workers.claim("w", 3, wait_s=0)
    engine.workers.settle([ack(first.lease_id, first.token)])
    sent = engine.commits.commit_positions()
    engine.workers.settle([ack(g.lease_id, g.token) for g in (second, third)])
    engine.commits.committed(sent)  # describes offset 0 only: two finished jobs are still unsaved
    assert engine.workers.claim("w", 2, wait_s=0) == []
    engine.commits.committed(engine.commits.commit_positions())
    assert len(engine.workers.claim("w", 2, wait_s=0)) == 2
