"""A claim's answer is capped in bytes below the worker's message limit: the jobs that
would pass the cap are not leased (they stay ready for the next call), and a job
larger than the cap still goes, alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobcore.config import CLAIM_ANSWER_BYTES, RPC_MESSAGE_BYTES
from leasekeeper.core.leases import Grant, Pending, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.rpc.listen import ChannelSecurity
from leasekeeper.rpc.server import LeaseKeeperServicer, start_rpc_server
from leasekeeper.rpc.wire import claimed, claimed_size
from schemas import worker_pb2 as pb
from schemas.job import Job
from schemas.job_headers import JobHead
from workers.client import CHANNEL_OPTIONS, LeaseKeeperClient

TP = TopicPart("jobs.q", 0)
KB = 1024


class Peerless:
    def peer(self) -> str:
        return "unix:test"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[LeaseEngine]:
    engine = LeaseEngine(
        store=LeaseStore(tmp_path / "state"), config=EngineConfig(window_bytes=256 * 1024 * KB)
    )
    engine.partitions.assign(TP, 0)
    yield engine
    engine.close()


def _job(n: int, payload: bytes, trace: dict[str, str] | None = None) -> Job:
    return Job(job_id=f"j{n}", queue="q", tenant_id="t", type="noop", payload=payload,
               created_at_ms=1, trace=trace or {})  # fmt: skip


def _offer(engine: LeaseEngine, count: int, size: int) -> None:
    payload = b"p" * size  # one object for every job: the test's memory stays small
    envelope = b"e" * size
    for n in range(count):
        engine.fetch.offer(TP, n, _job(n, payload), envelope)


def _claim(servicer: LeaseKeeperServicer, n: int) -> pb.ClaimResponse:
    request = pb.ClaimRequest(worker_id="w1", max_jobs=n, wait_ms=0)
    return servicer.Claim(request, Peerless())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("payload", "trace", "tenant"),
    [
        (b"", None, "t"),
        (b"x" * 300, {"traceparent": "00-abc-def-01", "tracestate": "k=v"}, "t"),
        (b"y" * 70_000, None, "t\u00e9nant-\u4e2d"),  # multi-byte lengths, 3-byte varints
    ],
)
def test_the_size_estimate_is_at_least_the_encoded_job_and_close_to_it(
    payload: bytes, trace: dict[str, str] | None, tenant: str
) -> None:
    job = Job(job_id="job-\u00fc-1", queue="q", tenant_id=tenant, type="noop",
              payload=payload, created_at_ms=1, trace=trace or {}, max_attempts=-1,
              attempt=0)  # fmt: skip
    pending = Pending(TP, 12345678, 0, JobHead.of(job), b"e" * (len(payload) + 40))
    grant = Grant(lease_id=pending.lease_id, token="0123456789abcdef", until_ms=2**62,
                  attempt=-1, lease_s=30.0, envelope=pending.envelope, job=pending.job,
                  payload=payload)  # fmt: skip
    in_answer = pb.ClaimResponse(jobs=[claimed(grant)]).ByteSize()
    in_settle = pb.SettleResponse(jobs=[claimed(grant)]).ByteSize()
    estimate = claimed_size(pending)
    assert estimate >= max(in_answer, in_settle)
    assert estimate - in_answer < 200, "an estimate, not a guess"


def test_a_claim_whose_jobs_would_pass_the_cap_returns_fewer_and_leaves_the_rest_ready(
    engine: LeaseEngine,
) -> None:
    servicer = LeaseKeeperServicer(engine, dict, answer_bytes=700 * KB)
    _offer(engine, 10, 100 * KB)  # ~200 KB a job on the wire: its payload and record

    first = _claim(servicer, 10)
    assert len(first.jobs) == 3
    assert first.ByteSize() <= 700 * KB
    # Not leased: the rest are claimable at once, not after a lease length.
    assert engine.partitions.in_flight() == 3
    second = _claim(servicer, 10)
    assert [j.job_id for j in second.jobs] == ["j3", "j4", "j5"]
    assert engine.partitions.in_flight() == 6
    assert engine.counters.expired == 0


def test_a_single_job_larger_than_the_cap_is_still_delivered(engine: LeaseEngine) -> None:
    servicer = LeaseKeeperServicer(engine, dict, answer_bytes=100 * KB)
    _offer(engine, 3, 200 * KB)
    answers = [_claim(servicer, 10) for _ in range(3)]
    assert [[j.job_id for j in a.jobs] for a in answers] == [["j0"], ["j1"], ["j2"]]


def test_a_settles_then_claim_is_capped_too(engine: LeaseEngine) -> None:
    servicer = LeaseKeeperServicer(engine, dict, answer_bytes=700 * KB)
    _offer(engine, 10, 100 * KB)
    (first,) = _claim(servicer, 1).jobs
    ref = pb.LeaseRef(lease_id=first.lease_id, lease_token=first.lease_token)
    request = pb.SettleRequest(worker_id="w1",
                               settlements=[pb.Settlement(lease=ref, outcome=pb.ACK)],
                               then_claim=pb.ClaimRequest(max_jobs=9))  # fmt: skip
    answer = servicer.Settle(request, Peerless())  # type: ignore[arg-type]
    assert len(answer.jobs) == 3 and answer.ByteSize() <= 700 * KB
    assert engine.partitions.in_flight() == 3


def test_the_cap_leaves_room_under_the_workers_limit_for_the_largest_kafka_record() -> None:
    options = dict(CHANNEL_OPTIONS)
    assert options["grpc.max_receive_message_length"] == RPC_MESSAGE_BYTES
    # A job alone: its record (Kafka's max.message.bytes, 1 MB by default; raised
    # tenfold here) and its payload again; the rest of an answer fits the headroom.
    assert CLAIM_ANSWER_BYTES >= 2 * 10 * 1_000_000
    assert RPC_MESSAGE_BYTES - CLAIM_ANSWER_BYTES >= 4 * 1024 * KB


def test_an_answer_over_the_workers_limit_arrives_in_two_claims_over_the_socket(
    tmp_path: Path,
) -> None:
    """The real limits: 40 jobs of a 1 MB record each (Kafka's default maximum) are
    ~80 MB on the wire, past the worker's 64 MiB; they come in two answers."""
    engine = LeaseEngine(
        store=LeaseStore(tmp_path / "state"), config=EngineConfig(window_bytes=256 * 1024 * KB)
    )
    engine.partitions.assign(TP, 0)
    _offer(engine, 40, 1_000_000)
    listen = f"unix:{tmp_path / 'lk' / 'lk.sock'}"
    server = start_rpc_server(engine=engine, snapshot=dict, listen=listen,
                              security=ChannelSecurity(), threads=2)  # fmt: skip
    try:
        with LeaseKeeperClient(listen, worker_id="w1") as client:
            first = client.claim(40, 0)
            second = client.claim(40, 0)
    finally:
        server.stop(0).wait()
        engine.close()
    assert 20 <= len(first) < 40
    assert len(first) + len(second) == 40
    assert {lease.job_id for lease in first + second} == {f"j{n}" for n in range(40)}
