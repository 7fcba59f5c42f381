"""A Claim that carries settlements: the leasekeeper's servicer over a real engine and
store settles them before it looks for jobs and answers each one in ``settled``."""

from __future__ import annotations

from pathlib import Path

from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.leases import Grant, TopicPart
from leasekeeper.rpc import LeaseKeeperServicer
from leasekeeper.store import LeaseStore
from schemas import worker_pb2 as pb
from schemas.job import Job

TP = TopicPart("jobs.q", 0)


def _engine(path: Path, jobs: int) -> LeaseEngine:
    engine = LeaseEngine(store=LeaseStore(path), config=EngineConfig(lease_s=10))
    engine.assign(TP, 0)
    for n in range(jobs):
        job = Job(job_id=f"job-{n}", queue="q", tenant_id="t", type="noop", payload=b"",
                  created_at_ms=0)  # fmt: skip
        engine.offer(TP, n, job, b"x")
    return engine


def _carried(grant: Grant, outcome: int, token: str | None = None) -> pb.Settlement:
    lease = pb.LeaseRef(lease_id=grant.lease_id, lease_token=token or grant.token)
    return pb.Settlement(lease=lease, outcome=outcome)  # type: ignore[arg-type]


def _claim(servicer: LeaseKeeperServicer, *carried: pb.Settlement) -> pb.ClaimResponse:
    request = pb.ClaimRequest(worker_id="w", max_jobs=1, wait_ms=0, settlements=carried)
    return servicer.Claim(request, None)  # type: ignore[arg-type]


def test_a_claim_settles_what_it_carries_and_answers_each(tmp_path: Path) -> None:
    engine = _engine(tmp_path, 3)
    first, second = engine.claim("w", 2, wait_s=0)
    servicer = LeaseKeeperServicer(engine, dict)
    response = _claim(servicer, _carried(first, pb.ACK), _carried(second, pb.ACK, "not-its-token"))
    assert [(r.lease_id, r.ok) for r in response.settled] == [
        (first.lease_id, True),
        (second.lease_id, False),
    ]
    assert response.settled[1].reason  # the refusal says why
    assert [job.lease_id for job in response.jobs] == ["jobs.q/0/2"]
    assert engine.counters.acked == 1 and engine.counters.stale_rejected == 1
    assert engine.commit_positions()[TP][0] == 1  # the carried ack counts at once


def test_a_claim_settles_before_it_looks_for_jobs(tmp_path: Path) -> None:
    """The job a carried release hands back is there for the same claim."""
    engine = _engine(tmp_path, 1)
    (held,) = engine.claim("w", 1, wait_s=0)
    response = _claim(LeaseKeeperServicer(engine, dict), _carried(held, pb.RELEASE))
    assert [r.ok for r in response.settled] == [True]
    assert [(job.lease_id, job.attempt) for job in response.jobs] == [(held.lease_id, 1)]


def test_a_claim_carrying_nothing_answers_no_settlements(tmp_path: Path) -> None:
    response = _claim(LeaseKeeperServicer(_engine(tmp_path, 1), dict))
    assert len(response.jobs) == 1 and list(response.settled) == []
