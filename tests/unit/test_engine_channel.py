"""The engine's side of the worker channel: settling in after a restart, and job types."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import UNKNOWN_JOB_TYPE, EngineConfig, LeaseEngine
from schemas.job import Job
from tests.unit.test_engine import Clock, RecordingRouter, job

TP = TopicPart("jobs.q", 0)
TP1 = TopicPart("jobs.q", 1)


def engine_at(path: Path, clock: Clock, router: RecordingRouter, **cfg: float) -> LeaseEngine:
    config = EngineConfig(lease_s=10, **cfg)  # type: ignore[arg-type]
    engine = LeaseEngine(store=LeaseStore(path), config=config, clock=clock, monotonic=clock)
    router.engine = engine
    return engine


def typed(i: int, job_type: str, tenant: str = "t1") -> Job:
    return replace(job(i, tenant), type=job_type)


def ack(lease_id: str, token: str) -> Settlement:
    return Settlement(lease_id=lease_id, token=token, outcome=SettleKind.ACK)


def test_a_restarted_engine_answers_retry_later_until_it_has_re_read_the_lease(
    tmp_path: Path,
) -> None:
    clock = Clock()
    first = engine_at(tmp_path, clock, RecordingRouter())
    first.partitions.assign(TP, 0)
    first.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = first.workers.claim("w", 1, wait_s=0)
    first._store.close()

    restarted = engine_at(tmp_path, clock, RecordingRouter())
    assert restarted.partitions.settling_in()
    # Before any assignment: the partition is not known yet.
    (early,) = restarted.workers.settle([ack(grant.lease_id, grant.token)])
    assert (early.ok, early.retry_later) == (False, True)
    (beat,) = restarted.workers.heartbeat([(grant.lease_id, grant.token)])
    assert (beat.ok, beat.retry_later) == (False, True)
    # Assigned, but the offset of the stored lease not fetched again yet.
    restarted.partitions.assign(TP, 0)
    restarted.partitions.assignment_received()
    (pending,) = restarted.workers.settle([ack(grant.lease_id, grant.token)])
    assert pending.retry_later
    assert restarted.counters.stale_rejected == 0
    restarted.fetch.offer(TP, 0, job(0), b"x")
    assert not restarted.partitions.settling_in()
    assert restarted.workers.settle([ack(grant.lease_id, grant.token)])[0].ok
    assert restarted.counters.acked == 1


def test_after_settling_in_a_lease_on_a_partition_not_owned_is_refused(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_at(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.partitions.assignment_received()
    assert not engine.partitions.settling_in()
    (answer,) = engine.workers.settle([ack(TP1.lease_id(5), "token")])
    assert (answer.ok, answer.retry_later) == (False, False)
    assert answer.reason.startswith("unknown lease")
    assert engine.counters.stale_rejected == 1


def test_settling_in_ends_at_its_time_limit_without_an_assignment(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_at(tmp_path, clock, RecordingRouter(), settle_in_max_s=30)
    assert engine.workers.settle([ack(TP.lease_id(3), "t")])[0].retry_later
    clock.now += 30
    assert not engine.partitions.settling_in()
    assert not engine.workers.settle([ack(TP.lease_id(3), "t")])[0].retry_later


def test_a_claim_hands_out_only_the_job_types_the_worker_runs(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_at(tmp_path, clock, RecordingRouter())
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, typed(0, "video"), b"x")
    engine.fetch.offer(TP, 1, typed(1, "email"), b"x")
    engine.fetch.offer(TP, 2, typed(2, "video", tenant="t2"), b"x")
    engine.fetch.offer(TP, 3, typed(3, "email", tenant="t2"), b"x")
    grants = engine.workers.claim("mailer", 10, wait_s=0, job_types=frozenset({"email"}))
    assert [g.lease_id for g in grants] == [TP.lease_id(1), TP.lease_id(3)]
    # Nothing else for it: the long poll times out instead of handing out video jobs.
    assert engine.workers.claim("mailer", 10, wait_s=0, job_types=frozenset({"email"})) == []
    others = engine.workers.claim("old-worker", 10, wait_s=0)
    assert [g.lease_id for g in others] == [TP.lease_id(0), TP.lease_id(2)]


def test_a_job_no_connected_worker_runs_waits_then_dead_letters_as_unknown_job_type(
    tmp_path: Path,
) -> None:
    clock = Clock()
    router = RecordingRouter()
    engine = engine_at(tmp_path, clock, router, unknown_type_grace_s=600)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, typed(0, "video"), b"x")
    # No worker connected yet: an outage, not an unknown type.
    assert engine.workers.sweep_unhandled() == 0
    engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert engine.workers.sweep_unhandled() == 0  # first seen unhandled now; the grace starts
    clock.now += 599
    engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert engine.workers.sweep_unhandled() == 0
    clock.now += 1
    engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert engine.workers.sweep_unhandled() == 1
    ((dead, reason, done),) = router.deaths
    assert reason == "unknown job type"
    assert dead.errors[-1].error_class == UNKNOWN_JOB_TYPE
    assert "'video'" in dead.errors[-1].message
    done(True)
    assert engine.commits.commit_positions()[TP][0] == 1


def test_the_unhandled_grace_counts_from_the_first_time_across_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    first = engine_at(tmp_path, clock, RecordingRouter(), unknown_type_grace_s=600)
    first.partitions.assign(TP, 0)
    first.fetch.offer(TP, 0, typed(0, "video"), b"x")
    first.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    first.workers.sweep_unhandled()
    first._store.close()

    clock.now += 600
    router = RecordingRouter()
    restarted = engine_at(tmp_path, clock, router, unknown_type_grace_s=600)
    restarted.partitions.assign(TP, 0)
    restarted.fetch.offer(TP, 0, typed(0, "video"), b"x")
    restarted.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert restarted.workers.sweep_unhandled() == 1
    assert [reason for _, reason, _ in router.deaths] == ["unknown job type"]


def test_a_worker_that_runs_any_type_keeps_unhandled_jobs_alive(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_at(tmp_path, clock, RecordingRouter(), unknown_type_grace_s=0)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, typed(0, "video"), b"x")
    engine.fetch.offer(TP, 1, typed(1, "video"), b"x")
    engine.workers.claim("old-worker", 1, wait_s=0)  # empty list: any type
    engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert engine.workers.sweep_unhandled() == 0
    clock.now += 61  # the old worker stopped claiming: no longer connected
    engine.workers.claim("mailer", 1, wait_s=0, job_types=frozenset({"email"}))
    assert engine.workers.sweep_unhandled() == 1
