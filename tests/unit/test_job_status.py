"""Status records (``jobs.Q.status``): the engine describes one whenever a job ends,
and ``producer cancel`` turns what it reads into one honest line and exit code."""

from __future__ import annotations

from pathlib import Path

from jobcore.control import (
    STATUS_SWITCH_KEY,
    Cancellation,
    CancelledHow,
    JobEnd,
    JobStatus,
    StatusSwitchedOff,
)
from jobcore.status import switched_off_note
from leasekeeper.core.copies import CopyKind
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from producer.status import CancelAnswer, CancelOutcome, ended
from schemas.job import Job
from schemas.job_headers import JobHead

TP = TopicPart("jobs.q", 0)
NOW_S = 1_800_000_000.0


def clock() -> float:
    return NOW_S


def make_engine(path: Path) -> LeaseEngine:
    return LeaseEngine(
        store=LeaseStore(path), config=EngineConfig(lease_s=10), clock=clock, monotonic=clock
    )


def job(i: int, run_at_ms: int = 0) -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, run_at_ms=run_at_ms)  # fmt: skip


def statuses(engine: LeaseEngine) -> list[JobStatus]:
    return engine.copies.take_statuses()


def test_an_ack_writes_succeeded_without_holding_the_commit(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle(
        [Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.ACK)]
    )
    assert [(s.job_id, s.state, s.attempt) for s in statuses(engine)] == [
        ("job-0", JobEnd.SUCCEEDED, 1)
    ]
    assert engine.commits.commit_positions()[TP][0] == 1  # the status copy is not waited for


def test_a_permanent_failure_writes_dead_once_the_dead_letter_is_delivered(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle([Settlement(lease_id=grant.lease_id, token=grant.token,
                                      outcome=SettleKind.NACK,
                              permanent=True)])  # fmt: skip
    (dead,) = [c for c in engine.copies.take() if c.kind is CopyKind.DEAD]
    assert statuses(engine) == []  # not before the dead letter is durable
    engine.copies.delivered(dead)
    ((job_id, state, reason),) = [(s.job_id, s.state, s.reason) for s in statuses(engine)]
    assert (job_id, state, reason) == ("job-0", JobEnd.DEAD, "permanent error")


def test_a_cancellation_is_answered_for_waiting_and_running_jobs(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)  # job-0 runs, job-1 waits
    engine.copies.take()
    engine.control.cancel(Cancellation(job_id="job-1", cancelled_at_ms=0))
    engine.control.cancel(Cancellation(job_id="job-0", cancelled_at_ms=0))
    engine.fetch.cancellations_arrived()
    assert [(s.job_id, s.reason) for s in statuses(engine)] == [
        ("job-1", CancelledHow.WAITING.value)
    ]
    engine.workers.heartbeat([(grant.lease_id, grant.token)])
    assert [(s.job_id, s.reason) for s in statuses(engine)] == [
        ("job-0", CancelledHow.RUNNING.value)
    ]


def test_a_cancelled_job_seen_in_a_held_tier_is_answered(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.control.cancel(Cancellation(job_id="job-0", cancelled_at_ms=0))
    engine.fetch.cancellations_arrived()  # not seen yet: nothing to say
    assert statuses(engine) == []
    engine.fetch.note_delayed(
        TopicPart("jobs.q.retry.1m", 0), 3, JobHead.of(job(0, run_at_ms=2_000_000_000_000))
    )
    assert [(s.job_id, s.state) for s in statuses(engine)] == [("job-0", JobEnd.CANCELLED)]


def test_status_records_round_trip_and_answers_name_the_case() -> None:
    status = JobStatus(job_id="j", state=JobEnd.DEAD, at_ms=5, attempt=3, reason="too large")
    assert JobStatus.decode(status.encode()) == status
    answer = CancelAnswer(job_id="j", outcome=ended(status), status=status)
    assert answer.exit_code == 5
    assert answer.message(str) == "not cancelled: job j already died (too large) at 5 (attempt 3)"
    running = JobStatus(job_id="j", state=JobEnd.CANCELLED, at_ms=5, attempt=2,
                        reason=CancelledHow.RUNNING.value)  # fmt: skip
    assert ended(running) is CancelOutcome.LEASE_ENDED
    assert CancelAnswer(job_id="j", outcome=CancelOutcome.NOT_FOUND).exit_code == 6
    recorded = CancelAnswer(job_id="j", outcome=CancelOutcome.RECORDED)
    assert (recorded.exit_code, recorded.message(str)) == (
        0,
        "cancellation recorded: the job will be skipped if it has not run yet",
    )


def test_status_records_name_the_worker_and_a_dead_jobs_last_error(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    first, second = engine.workers.claim("worker-7", 2, wait_s=0)
    engine.workers.settle(
        [Settlement(lease_id=first.lease_id, token=first.token, outcome=SettleKind.ACK)]
    )
    engine.workers.settle([Settlement(lease_id=second.lease_id, token=second.token,
                                      outcome=SettleKind.NACK,
                              permanent=True, error_class="ValueError",
                              message="bad input")])  # fmt: skip
    (dead,) = [c for c in engine.copies.take() if c.kind is CopyKind.DEAD]
    engine.copies.delivered(dead)
    ended_ = statuses(engine)
    found = {s.job_id: s for s in ended_}
    assert (found["job-0"].worker, found["job-0"].last_error) == ("worker-7", "")
    assert (found["job-1"].worker, found["job-1"].last_error) == (
        "worker-7",
        "ValueError: bad input",
    )
    again = JobStatus.decode(found["job-1"].encode())
    assert again == found["job-1"]
    old = b'{"v": 1, "job_id": "j", "state": "succeeded", "at": 5, "attempt": 1, "reason": ""}'
    assert JobStatus.decode(old).worker == "" and JobStatus.decode(old).last_error == ""


def test_the_duration_is_the_run_time_the_worker_reported_not_the_lease_age(
    tmp_path: Path,
) -> None:
    # The engine's clocks stand still: a lease's age is 0 whatever happens, so a
    # duration can only come from the worker's figure in its settlement.
    engine = make_engine(tmp_path)
    engine.partitions.assign(TP, 0)
    for offset in range(3):
        engine.fetch.offer(TP, offset, job(offset), b"x")
    ok, dies, silent = engine.workers.claim("w", 3, wait_s=0)
    engine.workers.settle([
        Settlement(lease_id=ok.lease_id, token=ok.token, outcome=SettleKind.ACK, run_s=42.5),
        Settlement(lease_id=dies.lease_id, token=dies.token, outcome=SettleKind.NACK,
                   permanent=True, run_s=7.25),
        Settlement(lease_id=silent.lease_id, token=silent.token, outcome=SettleKind.ACK),
    ])  # fmt: skip
    (dead,) = [c for c in engine.copies.take() if c.kind is CopyKind.DEAD]
    engine.copies.delivered(dead)
    found = {s.job_id: s for s in statuses(engine)}
    assert found["job-0"].duration_s == 42.5
    assert found["job-1"].duration_s == 7.25
    assert found["job-2"].duration_s is None  # not reported: unknown, not 0
    assert JobStatus.decode(found["job-0"].encode()).duration_s == 42.5
    old = b'{"v": 1, "job_id": "j", "state": "succeeded", "at": 5, "attempt": 1, "reason": ""}'
    assert JobStatus.decode(old).duration_s is None


def test_with_status_records_off_no_path_writes_one(tmp_path: Path) -> None:
    engine = LeaseEngine(store=LeaseStore(tmp_path), clock=clock, monotonic=clock,
                         config=EngineConfig(lease_s=10, status_records=False))  # fmt: skip
    engine.partitions.assign(TP, 0)
    for offset in range(3):
        engine.fetch.offer(TP, offset, job(offset), b"x")
    ok, dies, running = engine.workers.claim("w", 3, wait_s=0)
    engine.workers.settle([
        Settlement(lease_id=ok.lease_id, token=ok.token, outcome=SettleKind.ACK),
        Settlement(lease_id=dies.lease_id, token=dies.token, outcome=SettleKind.NACK,
                   permanent=True),
    ])  # fmt: skip
    (dead,) = [c for c in engine.copies.take() if c.kind is CopyKind.DEAD]
    engine.copies.delivered(dead)
    engine.control.cancel(Cancellation(job_id="job-2", cancelled_at_ms=0))
    engine.fetch.cancellations_arrived()
    engine.workers.heartbeat([(running.lease_id, running.token)])
    assert engine.copies.take_statuses() == []
    assert [c for c in engine.copies.take() if c.kind is CopyKind.STATUS] == []
    assert engine.commits.commit_positions()[TP][0] == 3  # the jobs still resolve


def test_the_switch_record_reads_back_and_is_no_job_status() -> None:
    off = StatusSwitchedOff(at_ms=5, instance="lk-1")
    assert StatusSwitchedOff.decode(off.encode()) == off
    assert StatusSwitchedOff.decode(b"{}") is None and StatusSwitchedOff.decode(b"x") is None
    assert not STATUS_SWITCH_KEY.decode().isprintable()  # never a job id
    note = switched_off_note("q", 1_800_000_000_000)
    assert note.startswith("status records are off for queue q since 2027-01-15T08:00:00Z")


def test_a_held_tier_record_fetched_again_is_noted_and_answered_once(tmp_path: Path) -> None:
    """A held tier's records are fetched again each time its head is checked: a
    cancelled one among them is answered once, not once per fetch; the partition's
    next owner (a new assignment) notes it again."""
    tier = TopicPart("jobs.q.retry.1m", 0)
    engine = make_engine(tmp_path)
    engine.partitions.assign(tier, 0)
    engine.control.cancel(Cancellation(job_id="job-0", cancelled_at_ms=0))
    engine.fetch.cancellations_arrived()
    delayed = JobHead.of(job(0, run_at_ms=2_000_000_000_000))
    for _ in range(3):  # the head's wait checked three times
        engine.fetch.note_delayed(tier, 3, delayed)
    assert [s.job_id for s in statuses(engine)] == ["job-0"]
    engine.partitions.revoke(tier)
    engine.partitions.assign(tier, 0)
    engine.fetch.note_delayed(tier, 3, delayed)
    assert [s.job_id for s in statuses(engine)] == ["job-0"]
