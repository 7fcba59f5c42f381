"""The Settle call's ``then_claim``: settle, then claim without waiting, in one call."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from leasekeeper.core.leases import TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.rpc.server import LeaseKeeperServicer
from schemas import worker_pb2 as pb
from schemas.job import Job

TP = TopicPart("jobs.q", 0)


class Peerless:
    """The one thing the servicer asks of a call's context: who is calling."""

    def peer(self) -> str:
        return "unix:test"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[LeaseEngine]:
    engine = LeaseEngine(store=LeaseStore(tmp_path / "state"), config=EngineConfig())
    engine.partitions.assign(TP, 0)
    yield engine
    engine.close()


def _offer(engine: LeaseEngine, offsets: range) -> None:
    for n in offsets:
        job = Job(job_id=f"j{n}", queue="q", tenant_id="t", type="noop", payload=b"",
                  created_at_ms=1)  # fmt: skip
        engine.fetch.offer(TP, n, job, b"x")


def _claim(servicer: LeaseKeeperServicer, n: int) -> list[pb.ClaimedJob]:
    request = pb.ClaimRequest(worker_id="w1", max_jobs=n, wait_ms=0)
    return list(servicer.Claim(request, Peerless()).jobs)  # type: ignore[arg-type]


def _acks(jobs: list[pb.ClaimedJob]) -> list[pb.Settlement]:
    return [
        pb.Settlement(
            lease=pb.LeaseRef(lease_id=j.lease_id, lease_token=j.lease_token), outcome=pb.ACK
        )
        for j in jobs
    ]


def test_a_settle_with_then_claim_acks_then_hands_out_the_next_jobs(
    engine: LeaseEngine,
) -> None:
    servicer = LeaseKeeperServicer(engine, dict)
    _offer(engine, range(5))
    first = _claim(servicer, 2)
    request = pb.SettleRequest(
        worker_id="w1", settlements=_acks(first), then_claim=pb.ClaimRequest(max_jobs=2)
    )
    answer = servicer.Settle(request, Peerless())  # type: ignore[arg-type]
    assert [r.ok for r in answer.results] == [True, True]
    assert [j.job_id for j in answer.jobs] == ["j2", "j3"]
    assert all(j.lease_token and j.attempt == 1 for j in answer.jobs)
    assert engine.counters.acked == 2
    # The jobs it handed out are leased like any claim's: acked in turn, the last left.
    again = servicer.Settle(pb.SettleRequest(settlements=_acks(list(answer.jobs))), Peerless())  # type: ignore[arg-type]
    assert [r.ok for r in again.results] == [True, True] and list(again.jobs) == []
    assert [j.job_id for j in _claim(servicer, 5)] == ["j4"]


def test_then_claim_never_waits_for_jobs(engine: LeaseEngine) -> None:
    """Its wait_ms is ignored: with nothing ready the answer comes at once, with no jobs."""
    servicer = LeaseKeeperServicer(engine, dict)
    _offer(engine, range(1))
    (only,) = _claim(servicer, 1)
    request = pb.SettleRequest(
        worker_id="w1",
        settlements=_acks([only]),
        then_claim=pb.ClaimRequest(max_jobs=8, wait_ms=30_000),
    )
    started = time.monotonic()
    answer = servicer.Settle(request, Peerless())  # type: ignore[arg-type]
    assert time.monotonic() - started < 10, "a 30 s claim wait would have held the answer"
    assert [r.ok for r in answer.results] == [True] and list(answer.jobs) == []


def test_a_settle_without_then_claim_or_with_no_room_claims_nothing(
    engine: LeaseEngine,
) -> None:
    servicer = LeaseKeeperServicer(engine, dict)
    _offer(engine, range(3))
    first = _claim(servicer, 2)
    plain = servicer.Settle(pb.SettleRequest(settlements=_acks(first[:1])), Peerless())  # type: ignore[arg-type]
    no_room = servicer.Settle(
        pb.SettleRequest(settlements=_acks(first[1:]), then_claim=pb.ClaimRequest(max_jobs=0)),
        Peerless(),  # type: ignore[arg-type]
    )
    assert list(plain.jobs) == [] and list(no_room.jobs) == []
    assert [j.job_id for j in _claim(servicer, 5)] == ["j2"], "the ready job is still there"


def _settle_and_claim(jobs: list[pb.ClaimedJob], max_jobs: int, settle_id: str) -> pb.SettleRequest:
    return pb.SettleRequest(worker_id="w1", settlements=_acks(jobs), settle_id=settle_id,
                            then_claim=pb.ClaimRequest(max_jobs=max_jobs))  # fmt: skip


def test_a_settle_sent_again_with_its_id_gets_the_same_jobs_not_a_second_claim(
    engine: LeaseEngine,
) -> None:
    """The first answer was lost (a deadline, a reset connection): the resend is answered
    with the jobs the first one leased, under the same tokens, and leases none more."""
    servicer = LeaseKeeperServicer(engine, dict)
    _offer(engine, range(8))
    first = _claim(servicer, 2)
    request = _settle_and_claim(first, 3, "settle-1")
    lost = servicer.Settle(request, Peerless())  # type: ignore[arg-type]
    again = servicer.Settle(request, Peerless())  # type: ignore[arg-type]

    assert [r.ok for r in again.results] == [True, True], "already settled: still ok"
    assert [(j.job_id, j.lease_token, j.attempt) for j in again.jobs] == [
        (j.job_id, j.lease_token, j.attempt) for j in lost.jobs
    ]
    assert [j.job_id for j in again.jobs] == ["j2", "j3", "j4"]
    pairs = zip(again.jobs, lost.jobs, strict=True)
    assert all(a.lease_until_ms >= b.lease_until_ms for a, b in pairs), "extended, if at all"
    assert engine.partitions.in_flight() == 3, "no jobs leased past the first answer's"
    assert [j.job_id for j in _claim(servicer, 8)] == ["j5", "j6", "j7"]
    # A fresh id is a new Settle: it claims.
    fresh = servicer.Settle(_settle_and_claim(list(again.jobs), 3, "settle-2"), Peerless())  # type: ignore[arg-type]
    assert list(fresh.jobs) == [] and engine.counters.acked == 5


def test_a_resend_leaves_out_the_jobs_whose_lease_ended(engine: LeaseEngine) -> None:
    servicer = LeaseKeeperServicer(engine, dict)
    _offer(engine, range(4))
    first = _claim(servicer, 1)
    request = _settle_and_claim(first, 2, "settle-1")
    lost = list(servicer.Settle(request, Peerless()).jobs)  # type: ignore[arg-type]
    servicer.Settle(pb.SettleRequest(settlements=_acks(lost[:1])), Peerless())  # type: ignore[arg-type]
    again = servicer.Settle(request, Peerless())  # type: ignore[arg-type]
    assert [j.job_id for j in again.jobs] == [lost[1].job_id]
    assert engine.partitions.in_flight() == 1


def test_a_settle_without_an_id_claims_each_time_as_before(engine: LeaseEngine) -> None:
    """An older worker sends no id: each Settle is its own claim, as it always was."""
    servicer = LeaseKeeperServicer(engine, dict)
    _offer(engine, range(5))
    first = _claim(servicer, 1)
    request = _settle_and_claim(first, 2, "")
    one = servicer.Settle(request, Peerless())  # type: ignore[arg-type]
    two = servicer.Settle(request, Peerless())  # type: ignore[arg-type]
    assert [j.job_id for j in one.jobs] == ["j1", "j2"]
    assert [j.job_id for j in two.jobs] == ["j3", "j4"]
