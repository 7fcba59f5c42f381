"""The claim carries the job's fields and payload, so the worker decodes only the
payload; a claim from a leasekeeper without those fields still works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from leasekeeper.core.leases import Grant
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.rpc.wire import claimed as _claimed
from schemas import worker_pb2 as pb
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.job_headers import JobHead, job_headers, read_head
from workers import App
from workers.decoding import Runnable, Unrunnable, prepare
from workers.messages import ClaimedJob
from workers.wire import lease as _lease

CODEC = EnvelopeCodec(SchemaRegistry())


def _job() -> Job:
    return Job(job_id="j-9", queue="q", tenant_id="t", type="noop", max_attempts=5,
               timeout_s=4.0, payload=CODEC.encode_payload("noop", {"n": 4}),
               created_at_ms=123, trace={"traceparent": "00-a-b-01"})  # fmt: skip


def _grant(*, fields: bool) -> Grant:
    job = _job()
    value = CODEC.encode(job)
    head = read_head(b"t", job_headers(job, value), value)
    assert head is not None
    return Grant(lease_id="jobs.q/0/7", token="tok", until_ms=99, attempt=2, lease_s=30,
                 envelope=value, job=head if fields else None,
                 payload=head.payload(value) if fields else b"")  # fmt: skip


def _over_the_wire(grant: Grant) -> ClaimedJob:
    wire = pb.ClaimResponse(jobs=[_claimed(grant)]).SerializeToString()
    (claimed,) = pb.ClaimResponse.FromString(wire).jobs
    return _lease(claimed)


class _PayloadOnly:
    """A decoder that refuses envelopes: the claim's fields must be enough."""

    def __init__(self) -> None:
        self.payloads = 0

    def decode(self, data: bytes, /) -> Job:
        raise AssertionError("the envelope was decoded")

    def decode_payload(self, job_type: str, data: bytes, /) -> dict[str, Any]:
        self.payloads += 1
        return CODEC.decode_payload(job_type, data)


def _app() -> App:
    app = App("t")
    app.job("noop")(lambda ctx, payload: None)
    return app


def test_the_claim_carries_the_fields_and_the_worker_decodes_only_the_payload() -> None:
    lease = _over_the_wire(_grant(fields=True))
    assert lease.has_fields
    decoder = _PayloadOnly()
    prepared = prepare(_app(), decoder, lease)
    assert isinstance(prepared, Runnable)
    assert prepared.payload == {"n": 4} and decoder.payloads == 1
    ctx = prepared.ctx
    assert (ctx.job_id, ctx.type, ctx.tenant_id, ctx.queue) == ("j-9", "noop", "t", "q")
    assert (ctx.attempt, ctx.max_attempts, ctx.created_at_ms) == (2, 5, 123)
    assert dict(ctx.trace) == {"traceparent": "00-a-b-01"}
    assert prepared.timeout_s == 4.0


def test_a_claim_without_fields_is_decoded_from_the_envelope() -> None:
    """What a leasekeeper from before the fields sends: the envelope only."""
    lease = _over_the_wire(_grant(fields=False))
    assert not lease.has_fields
    prepared = prepare(_app(), CODEC, lease)
    assert isinstance(prepared, Runnable)
    assert prepared.payload == {"n": 4} and prepared.ctx.job_id == "j-9"
    assert dict(prepared.ctx.trace) == {"traceparent": "00-a-b-01"}


def test_a_claimed_type_without_a_handler_is_released_without_a_decode() -> None:
    lease = _over_the_wire(_grant(fields=True))
    prepared = prepare(App("other"), _PayloadOnly(), lease)
    assert isinstance(prepared, Unrunnable) and prepared.release
    assert prepared.ctx.job_id == "j-9"


def test_an_undecodable_claimed_payload_is_a_permanent_failure() -> None:
    grant = _grant(fields=True)
    grant.payload = b"\xc3\x01garbage"
    prepared = prepare(_app(), CODEC, _over_the_wire(grant))
    assert isinstance(prepared, Unrunnable) and prepared.failure.permanent
    assert "noop payload" in prepared.failure.message


def test_a_class_weighted_above_the_default_is_claimed_to_run_first(tmp_path: Path) -> None:
    """Critical (6 against default's 3) runs before a worker's prefetched jobs; the
    default and bulk classes keep their claim order, and with other weights so does
    every class that does not outrank the default."""
    engine = LeaseEngine(store=LeaseStore(tmp_path / "a"), config=EngineConfig())
    assert engine.workers.run_first_classes == frozenset({"critical"})
    flat = EngineConfig(class_weights={"urgent": 3, "default": 3, "bulk": 1})
    assert (
        LeaseEngine(store=LeaseStore(tmp_path / "b"), config=flat).workers.run_first_classes
        == set()
    )
    grant = Grant(lease_id="q/0/1", token="t", until_ms=1, attempt=1, lease_s=30.0,
                  envelope=b"", job=JobHead("j", "q", "t", "noop", "critical", 0, 3, 0, 30.0,
                                            None, 1, {}), payload=b"p")  # fmt: skip
    assert _claimed(grant, engine.workers.run_first_classes).run_first
    assert grant.job is not None
    grant.job.priority_class = "bulk"
    assert not _claimed(grant, engine.workers.run_first_classes).run_first
    assert _lease(_claimed(grant, frozenset({"bulk"}))).run_first  # the worker reads it
