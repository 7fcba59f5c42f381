"""Job results without Kafka: the encoding, the cap and the partition both sides share,
the worker keeping a handler's return value for its ack, and the leasekeeper writing
it as a copy that resolves the job only once durable."""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path
from typing import Any

import pytest

from jobcore.control import JobEnd
from jobcore.delay_tiers import DelayTiers
from jobcore.results import (
    DEFAULT_RESULT_BYTES,
    MAX_RESULT_BYTES,
    RESULTS_PARTITIONS,
    ResultEncoder,
    ResultNotSerialisable,
    ResultTooLarge,
    ResultUndecodable,
    decode_result,
    encode_result,
    result_headers,
    result_limit,
    result_text,
    results_partition,
)
from jobcore.topics import QueueTopics
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.router import KafkaRouter
from schemas import worker_pb2
from schemas.codec import MARKER, EnvelopeCodec, PayloadError, SchemaRegistry
from schemas.job import Job
from workers import wire
from workers.app import Handler
from workers.context import JobContext
from workers.execution import call_async, call_sync
from workers.inflight import Held
from workers.messages import ClaimedJob, LeaseRef, WorkerSettlement

TP = TopicPart("jobs.q", 0)


# -- the shared definition ------------------------------------------------------------


def test_a_result_is_compact_utf8_json_and_decodes_to_what_was_returned() -> None:
    value = {"url": "https://cdn.example/thumbs/1.png", "size": [64, 64], "név": "é"}
    data = encode_result(value, "thumbnail")
    assert data == '{"url":"https://cdn.example/thumbs/1.png","size":[64,64],"név":"é"}'.encode()
    assert decode_result(data) == value


def test_a_result_over_the_cap_says_to_store_it_elsewhere_and_return_a_reference() -> None:
    big = "x" * DEFAULT_RESULT_BYTES
    with pytest.raises(ResultTooLarge) as raised:
        encode_result(big, "report")
    message = str(raised.value)
    assert "'report'" in message and f"{DEFAULT_RESULT_BYTES + 2} bytes" in message
    assert "store the value elsewhere" in message and "return a reference" in message
    assert len(encode_result(big, "report", limit=MAX_RESULT_BYTES)) == DEFAULT_RESULT_BYTES + 2


@pytest.mark.parametrize("value", [{1, 2}, object(), float("nan"), b"bytes"])
def test_a_value_json_cannot_carry_is_refused_with_what_to_return(value: object) -> None:
    with pytest.raises(ResultNotSerialisable, match="return None, or a str, number"):
        encode_result(value, "t")


@pytest.mark.parametrize("limit", [0, MAX_RESULT_BYTES + 1])
def test_the_cap_is_at_most_64_kib(limit: int) -> None:
    with pytest.raises(ValueError, match="between 1 and 65536 bytes"):
        result_limit(limit)
    assert result_limit(MAX_RESULT_BYTES) == MAX_RESULT_BYTES


def test_the_results_partition_is_crc32_of_the_job_id() -> None:
    ids = [f"{i:032x}" for i in range(200)]
    assert [results_partition(i) for i in ids] == [
        zlib.crc32(i.encode()) % RESULTS_PARTITIONS for i in ids
    ]
    assert set(results_partition(i) for i in ids) == set(range(RESULTS_PARTITIONS))
    assert results_partition("job-1") == 7  # fixed: a reader elsewhere computes the same


def test_the_results_topic_is_named_with_the_queue() -> None:
    assert QueueTopics(queue="thumbs").results == "jobs.thumbs.results"
    with pytest.raises(ValueError, match="'results' after a dot is reserved"):
        QueueTopics(queue="thumbs.results")


def _render_codec() -> EnvelopeCodec:
    return EnvelopeCodec(SchemaRegistry(extra_dirs=[Path(__file__).parents[1] / "apps/schemas"]))


def test_a_type_with_a_result_schema_returns_avro_checked_like_a_payload() -> None:
    codec = _render_codec()
    value = {"url": "https://f/1.pdf", "pages": 2, "sizes": [10, 20]}
    data = ResultEncoder(codec=codec).encode(value, "render")
    assert data[:2] == MARKER and data[2:10] == codec.registry.current("render.result").fingerprint
    assert decode_result(data, codec.registry) == value
    assert result_headers(data) == (("content-type", b"application/avro; encoding=single-object"),)
    assert (
        result_text(data, codec.registry) == '{"url":"https://f/1.pdf","pages":2,"sizes":[10,20]}'
    )
    # A type without one stays JSON, with its own header.
    plain = ResultEncoder(codec=codec).encode(value, "task")
    assert decode_result(plain) == value and result_headers(plain)[0][1] == b"application/json"
    # The schema's checks, as a payload's: the field and what was wrong.
    with pytest.raises(ResultNotSerialisable, match=r"render\.result refuses: field 'url'"):
        ResultEncoder(codec=codec).encode({"url": 42, "pages": 1}, "render")
    with pytest.raises(ResultNotSerialisable, match="expected an object"):
        ResultEncoder(codec=codec).encode([1, 2], "render")
    with pytest.raises(ResultTooLarge, match="store the value elsewhere"):
        ResultEncoder(64, codec).encode({"url": "u" * 100, "pages": 1}, "render")


def test_an_avro_result_needs_its_schema_to_be_read_and_says_so() -> None:
    data = ResultEncoder(codec=_render_codec()).encode({"url": "u", "pages": 1}, "render")
    with pytest.raises(ResultUndecodable, match="registry that holds that schema"):
        decode_result(data)
    with pytest.raises(ResultUndecodable, match="unknown schema fingerprint"):
        decode_result(data, SchemaRegistry())
    assert "not known to this reader" in result_text(data, SchemaRegistry())


def test_a_result_schema_is_no_job_type() -> None:
    codec = _render_codec()
    assert "render" in codec.registry.payload_types()
    assert "render.result" not in codec.registry.payload_types()
    with pytest.raises(PayloadError, match=r"no schema for job type 'render\.result'"):
        codec.validate_payload("render.result", {"url": "u", "pages": 1})


# -- the worker -------------------------------------------------------------------------


def _held() -> Held:
    lease = ClaimedJob(ref=LeaseRef("jobs.q/0/0", "tok"), until_ms=0, attempt=1, envelope=b"",
                  lease_s=30)  # fmt: skip
    ctx = JobContext(job_id="j", attempt=1, tenant_id="t", queue="q", type="thumb",
                     created_at_ms=0, lease_id="jobs.q/0/0")  # fmt: skip
    return Held(lease=lease, ctx=ctx, until_ms=0, beat_interval_s=10, next_beat_at=0)


def _handler(value: object) -> Handler:
    return Handler(job_type="thumb", func=lambda ctx, payload: value, is_async=False)


def test_a_handler_s_return_value_is_kept_encoded_for_its_ack() -> None:
    held = _held()
    assert call_sync(_handler({"url": "u"}), held.ctx, {}, held, ResultEncoder()) is None
    assert held.result == b'{"url":"u"}'
    message = wire.settlement(WorkerSettlement.ack(held.ref, 0.1, held.result))
    assert message.result == b'{"url":"u"}'


def test_none_is_no_result_and_sets_nothing_on_the_wire() -> None:
    held = _held()
    assert call_sync(_handler(None), held.ctx, {}, held, ResultEncoder()) is None
    assert held.result == b""
    message = wire.settlement(WorkerSettlement.ack(held.ref, 0.1, held.result))
    assert (
        message.ByteSize()
        == worker_pb2.Settlement(lease=message.lease, outcome=worker_pb2.ACK, run_s=0.1).ByteSize()
    )


def test_a_result_over_the_worker_s_cap_fails_the_job_permanently_saying_why() -> None:
    held = _held()
    failure = call_sync(_handler("x" * 200), held.ctx, {}, held, ResultEncoder(100))
    assert failure is not None and failure.permanent
    assert failure.error_class == "ResultTooLarge"
    assert "store the value elsewhere" in failure.message
    assert held.result == b""


def test_an_async_handler_s_return_value_is_kept_too() -> None:
    held = _held()

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> object:
        return [1, 2, 3]

    h = Handler(job_type="thumb", func=handler, is_async=True)
    assert asyncio.run(call_async(h, held.ctx, {}, held, ResultEncoder())) is None
    assert held.result == b"[1,2,3]"


# -- the leasekeeper -------------------------------------------------------------------


def _engine(tmp_path: Path, **config: Any) -> LeaseEngine:
    clock = lambda: 1_000_000.0  # noqa: E731
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10, **config),
                         clock=clock, monotonic=clock)  # fmt: skip
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, Job(job_id="job-1", queue="q", tenant_id="t", type="thumb",
                            payload=b"", created_at_ms=0), b"x")  # fmt: skip
    return engine


def _ack(engine: LeaseEngine, result: bytes) -> None:
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    (answer,) = engine.workers.settle([Settlement(lease_id=grant.lease_id, token=grant.token,
                                          outcome=SettleKind.ACK, result=result)])  # fmt: skip
    assert answer.ok


def test_an_ack_with_a_result_resolves_once_its_record_is_durable(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    _ack(engine, b'{"url":"u"}')
    (copy,) = engine.copies.take()
    assert copy.kind is CopyKind.RESULT and copy.raw_value == b'{"url":"u"}'
    assert engine.commits.commit_positions()[TP][0] == 0  # not past the job yet
    assert engine.copies.take_statuses() == []  # nor "succeeded" before the value can be read
    engine.copies.delivered(copy)
    assert engine.commits.commit_positions() == {TP: (1, "")}
    (status,) = engine.copies.take_statuses()
    assert (status.job_id, status.state) == ("job-1", JobEnd.SUCCEEDED)
    assert engine.counters.acked == 1


def test_an_ack_without_a_result_makes_no_copy(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    _ack(engine, b"")
    assert engine.copies.take() == []
    assert engine.commits.commit_positions() == {TP: (1, "")}


def test_a_result_over_the_leasekeeper_s_cap_dead_letters_the_job(tmp_path: Path) -> None:
    engine = _engine(tmp_path, max_result_bytes=10)
    _ack(engine, b'"' + b"x" * 20 + b'"')
    (copy,) = engine.copies.take()
    assert copy.kind is CopyKind.DEAD and copy.job is not None
    (error,) = copy.job.errors
    assert error.error_class == "ResultTooLarge" and "store the value elsewhere" in error.message


def test_the_result_record_goes_to_its_job_s_results_partition() -> None:
    codec = EnvelopeCodec(SchemaRegistry())
    router = KafkaRouter(codec=codec, topics=QueueTopics(queue="q"), tiers=DelayTiers())
    copy = CopyRequest(kind=CopyKind.RESULT, source=TP, offset=0, generation=0,
                       raw_key=b"job-1", raw_value=b"42")  # fmt: skip
    record = router.record(copy)
    assert record.topic == "jobs.q.results" and record.key == b"job-1"
    assert record.value == b"42" and record.partition == results_partition("job-1")


def test_a_job_acked_with_a_result_counts_as_ended_here_once_the_result_is_durable(
    tmp_path: Path,
) -> None:
    """A later copy of the job is skipped as already ended only once its value is kept:
    were the result dropped (its partition moved), the job must run again."""
    engine = _engine(tmp_path)
    _ack(engine, b"1")
    (copy,) = engine.copies.take()
    again = Job(job_id="job-1", queue="q", tenant_id="t", type="thumb", payload=b"",
                created_at_ms=0)  # fmt: skip
    engine.fetch.offer(TP, 1, again, b"x")
    assert engine.counters.resolved_again == 0
    engine.copies.delivered(copy)
    engine.fetch.offer(TP, 2, again, b"x")
    assert engine.counters.resolved_again == 1
