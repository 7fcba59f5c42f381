"""Job headers: what every writer puts on a job record, and what the leasekeeper reads
back without decoding the envelope (``schemas.job_headers``), in file and registry
mode; and the slow path for records without them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.core.copies import CopyKind, CopyRequest, Shrink
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.leases import Pending, SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.kafka.router import KafkaRouter
from schemas.codec import DecodeError, EnvelopeCodec, SchemaRegistry
from schemas.confluent import ConfluentSchemaRegistry, schema_text
from schemas.job import AttemptError, Job
from schemas.job_headers import H_ATTEMPT, H_VERSION, JobHead, job_headers, read_head
from schemas.vocabulary import DeadLetterReason
from tests.unit.engine_ports import with_ports
from tests.unit.test_registry_mode import FakeRegistry, _Consumer, _Message, _registered

TP = TopicPart("jobs.q", 0)
CODEC = EnvelopeCodec(SchemaRegistry())


def _job(**fields: object) -> Job:
    base: dict[str, object] = {
        "job_id": "j-1",
        "queue": "q",
        "tenant_id": "tenant-ü",
        "type": "noop",
        "payload": CODEC.encode_payload("noop", {"n": 7}),
        "created_at_ms": 1_700_000_000_000,
    }
    return Job(**(base | fields))  # type: ignore[arg-type]


def _record(job: Job, codec: EnvelopeCodec = CODEC) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    value = codec.encode(job)
    return job.tenant_id.encode(), value, job_headers(job, value)


def _same(head: JobHead, job: Job, value: bytes) -> None:
    assert (head.job_id, head.queue, head.tenant_id, head.type) == (
        job.job_id, job.queue, job.tenant_id, job.type,
    )  # fmt: skip
    assert (head.priority_class, head.attempt, head.max_attempts, head.run_at_ms) == (
        job.priority_class, job.attempt, job.max_attempts, job.run_at_ms,
    )  # fmt: skip
    assert (head.timeout_s, head.dedupe_key, head.created_at_ms) == (
        job.timeout_s, job.dedupe_key, job.created_at_ms,
    )  # fmt: skip
    assert dict(head.trace) == dict(job.trace)
    assert head.payload(value) == job.payload
    assert head.full is None  # read from headers: nothing decoded


def test_every_field_the_leasekeeper_reads_round_trips_through_headers() -> None:
    job = _job(
        attempt=3, max_attempts=5, run_at_ms=1_700_000_009_000, timeout_s=2.5,
        dedupe_key="order-42", priority_class="critical", trace={"traceparent": "00-ab-cd-01"},
    )  # fmt: skip
    key, value, headers = _record(job)
    head = read_head(key, headers, value)
    assert head is not None
    _same(head, job, value)


def test_fields_at_their_default_are_left_out() -> None:
    key, value, headers = _record(_job())
    names = [name for name, _ in headers]
    assert names[:2] == ["job_id", H_VERSION]
    assert not {"lq.a", "lq.r", "lq.dk", "lq.pc", "lq.tr"} & set(names)
    head = read_head(key, headers, value)
    assert head is not None
    _same(head, _job(), value)


def test_registry_mode_values_carry_the_same_headers() -> None:
    """The Confluent framing (magic byte and schema id) is 5 bytes, not 10: the payload
    is found in it all the same."""
    fake = FakeRegistry()
    registry = ConfluentSchemaRegistry(fake)
    for name, topic in registry.queue_subjects("q"):
        fake.register(registry.subject(name, topic=topic), schema_text(registry.current(name)))
    codec = EnvelopeCodec(registry)
    job = _job(payload=codec.encode_payload("noop", {"n": 9}), attempt=1)
    key, value, headers = _record(job, codec)
    assert value[:1] == b"\x00"
    head = read_head(key, headers, value)
    assert head is not None
    _same(head, job, value)
    assert codec.decode_payload("noop", head.payload(value)) == {"n": 9}


def test_a_value_of_unknown_framing_gets_only_the_job_id() -> None:
    job = _job()
    headers = job_headers(job, b"\x07" + CODEC.encode(job)[1:])
    assert headers == [("job_id", b"j-1")]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda h: [], "no headers"),
        (lambda h: [(n, v) for n, v in h if n != H_VERSION], "no version"),
        (lambda h: [(n, b"2" if n == H_VERSION else v) for n, v in h], "unknown version"),
        (lambda h: [(n, b"x" if n == "lq.ma" else v) for n, v in h], "not a number"),
        (lambda h: [(n, v) for n, v in h if n != "lq.ty"], "a required field missing"),
        (lambda h: [(n, None if n == "lq.q" else v) for n, v in h], "a header without value"),
        (lambda h: [(n, "1" if n == H_VERSION else v) for n, v in h], "a str, not bytes"),
        (lambda h: [(n, b"10,99999" if n == "lq.p" else v) for n, v in h], "payload outside"),
        (lambda h: [(n, b"nan" if n == "lq.to" else v) for n, v in h], "timeout NaN"),
        (lambda h: [*h, (H_ATTEMPT, b"-1")], "negative attempt"),
        (lambda h: [(n, b"0" if n == "lq.ma" else v) for n, v in h], "max_attempts 0"),
        (lambda h: [*h, ("lq.tr", b"[1]")], "trace not an object"),
        (lambda h: [(n, b"\xff" if n == "job_id" else v) for n, v in h], "not UTF-8"),
    ],
)
def test_headers_that_cannot_be_used_mean_the_slow_path(change: object, why: str) -> None:
    key, value, headers = _record(_job())
    changed = change(headers)  # type: ignore[operator]
    assert read_head(key, changed, value) is None, why


def test_a_record_without_a_key_is_read_the_slow_way() -> None:
    _, value, headers = _record(_job())
    assert read_head(None, headers, value) is None


def test_a_head_of_a_decoded_job_keeps_the_job() -> None:
    job = _job()
    head = JobHead.of(job)
    assert head.full is job and head.payload(b"") == job.payload


# -- the engine on heads alone --------------------------------------------------


class _Decodes:
    """The codec's decode, counted."""

    def __init__(self, codec: EnvelopeCodec) -> None:
        self.codec, self.calls = codec, 0

    def __call__(self, data: bytes) -> Job:
        self.calls += 1
        return self.codec.decode(data)


def _engine(path: Path, decode: _Decodes) -> LeaseEngine:
    engine = LeaseEngine(store=LeaseStore(path), config=EngineConfig(lease_s=10), decode=decode)
    engine.partitions.assign(TP, 0)
    return engine


def _offer(engine: LeaseEngine, offset: int, job: Job) -> bytes:
    key, value, headers = _record(job)
    head = read_head(key, headers, value)
    assert head is not None
    engine.fetch.offer(TP, offset, head, value)
    return value


def test_claim_and_ack_decode_nothing_and_the_grant_carries_fields_and_payload(
    tmp_path: Path,
) -> None:
    decode = _Decodes(CODEC)
    engine = _engine(tmp_path, decode)
    job = _job(max_attempts=4, timeout_s=7.0, trace={"traceparent": "00-1-2-01"})
    _offer(engine, 0, job)
    (grant,) = engine.workers.claim("w", 10, wait_s=0)
    assert grant.job is not None and grant.job.job_id == "j-1"
    assert grant.payload == job.payload and grant.attempt == 1
    engine.workers.settle(
        [Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.ACK)]
    )
    assert engine.commits.commit_positions() == {TP: (1, "")}
    assert decode.calls == 0


def test_a_nack_decodes_once_and_its_retry_copy_carries_the_new_attempt_in_its_headers(
    tmp_path: Path,
) -> None:
    decode = _Decodes(CODEC)
    engine = _engine(tmp_path, decode)
    _offer(engine, 0, _job(attempt=2, max_attempts=8))
    (grant,) = engine.workers.claim("w", 10, wait_s=0)
    assert grant.attempt == 3
    nack = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK,
                      error_class="Boom", message="boom")  # fmt: skip
    engine.workers.settle([nack])
    (copy,) = [c for c in engine.copies.take() if c.kind is CopyKind.RETRY]
    assert decode.calls == 1
    assert copy.job is not None and copy.job.attempt == 3
    assert [e.error_class for e in copy.job.errors] == ["Boom"]
    record = KafkaRouter(codec=CODEC, topics=QueueTopics(queue="q"), tiers=DelayTiers()).record(
        copy
    )
    head = read_head(record.key, list(record.headers), record.value)
    assert head is not None
    assert (head.attempt, head.run_at_ms) == (3, copy.job.run_at_ms)
    assert CODEC.decode(record.value).attempt == 3


def test_an_envelope_that_cannot_be_decoded_when_it_must_be_rewritten_is_dead_lettered_raw(
    tmp_path: Path,
) -> None:
    """Headers fine, envelope corrupt: it runs (nothing decodes it on the way), and its
    nack's copy keeps the bytes in the DLQ with the reason instead of failing."""
    engine = _engine(tmp_path, _Decodes(CODEC))
    job = _job()
    value = CODEC.encode(job)
    corrupt = value[:-3]  # its tail cut off
    head = read_head(b"t", job_headers(job, value), corrupt)
    assert head is not None
    engine.fetch.offer(TP, 0, head, corrupt)
    (grant,) = engine.workers.claim("w", 10, wait_s=0)
    nack = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK)
    engine.workers.settle([nack])
    (copy,) = engine.copies.take()
    assert copy.kind is CopyKind.DEAD_RAW and copy.raw_value == corrupt
    assert "could not be decoded" in copy.detail


def test_inspect_job_decodes_only_the_job_it_shows(tmp_path: Path) -> None:
    decode = _Decodes(CODEC)
    engine = _engine(tmp_path, decode)
    error = AttemptError(attempt=1, at_ms=5, worker="w", error_class="Boom", message="m",
                         traceback="")  # fmt: skip
    _offer(engine, 0, _job(job_id="a" * 12, attempt=1, errors=(error,)))
    for n in range(1, 4):
        _offer(engine, n, _job(job_id=f"other-{n}"))
    view = engine.views.job_view("a" * 12)
    assert view["errors"] == [{"attempt": 1, "error_class": "Boom", "message": "m"}]
    assert decode.calls == 1


def test_the_slow_path_decodes_once_for_good(tmp_path: Path) -> None:
    """A job offered decoded (no headers) keeps its job: a retry decodes nothing more."""
    decode = _Decodes(CODEC)
    engine = _engine(tmp_path, decode)
    job = _job()
    engine.fetch.offer(TP, 0, job, CODEC.encode(job))
    (grant,) = engine.workers.claim("w", 10, wait_s=0)
    assert grant.payload == job.payload
    engine.workers.settle(
        [Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK)]
    )
    assert [c.kind for c in engine.copies.take()] == [CopyKind.RETRY]
    assert decode.calls == 0


# -- the overflow lane moves records byte for byte ------------------------------


def _flooded(
    path: Path, decode: _Decodes, value_of: object = None
) -> tuple[LeaseEngine, list[bytes]]:
    """An engine with the lane on whose partition holds 30 jobs of one tenant, read
    from their headers, moved aside; returns it and the values fetched."""
    config = EngineConfig(lease_s=10, window_records=100, overflow_share=0.5)
    engine = LeaseEngine(store=LeaseStore(path), config=config, decode=decode)
    engine.partitions.assign(TP, 0)
    values = [_offer(engine, n, _job(job_id=f"big-{n}", tenant_id="big")) for n in range(30)]
    assert engine.overflow.floods({TP}, 20) == 30
    return engine, values


def _router() -> KafkaRouter:
    return KafkaRouter(codec=CODEC, topics=QueueTopics(queue="q"), tiers=DelayTiers())


def test_an_overflow_move_copies_the_fetched_record_without_decoding_it(tmp_path: Path) -> None:
    """Moving a flood aside decodes nothing: the copy is the fetched value, its headers
    made from the head (the same fields), into the same partition of the lane."""
    decode = _Decodes(CODEC)
    engine, values = _flooded(tmp_path, decode)
    copies = [c for c in engine.copies.take() if c.kind is CopyKind.OVERFLOW]
    assert [c.offset for c in copies] == list(range(30))
    assert all(c.job is None and c.head is not None for c in copies)
    record = _router().record(copies[7])
    assert (record.topic, record.partition) == ("jobs.q.overflow", TP.partition)
    assert record.value == values[7] and record.key == b"big"
    head = read_head(record.key, list(record.headers), record.value)
    assert head is not None
    _same(head, CODEC.decode(values[7]), record.value)
    for n, copy in enumerate(copies[:10]):
        engine.copies.delivered(copy, at=100 + n)
    assert engine.commits.commit_positions()[TP][0] == 10
    assert decode.calls == 0


def test_an_overflow_copy_too_large_for_the_lane_dies_as_its_decoded_job(tmp_path: Path) -> None:
    """Too large for the overflow topic (a topic configured smaller than the queue's):
    the copy sent byte for byte is decoded only then, dead-lettered, and its status
    record says so."""
    engine, _ = _flooded(tmp_path, _Decodes(CODEC))
    copy = next(c for c in engine.copies.take() if c.kind is CopyKind.OVERFLOW)
    record = _router().record(copy, Shrink.SHORT_HISTORY)
    assert record.topic == "jobs.q.dlq"
    letter = CODEC.decode_dead_letter(record.value)
    assert (
        letter.reason == DeadLetterReason.TOO_LARGE.value
        and "overflow copy was too large" in letter.detail
    )
    assert CODEC.decode(letter.envelope).job_id == "big-0"
    engine.copies.delivered(copy, dead=True)
    (status,) = engine.copies.take_statuses()
    assert (status.job_id, status.reason) == ("big-0", DeadLetterReason.TOO_LARGE.value)


def test_an_undecodable_overflow_copy_too_large_for_the_lane_is_dead_lettered_raw(
    tmp_path: Path,
) -> None:
    config = EngineConfig(lease_s=10, window_records=100, overflow_share=0.5)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, decode=_Decodes(CODEC))
    engine.partitions.assign(TP, 0)
    for n in range(30):
        job = _job(job_id=f"big-{n}", tenant_id="big")
        value = CODEC.encode(job)
        head = read_head(b"big", job_headers(job, value), value[:-3])  # tail cut off
        assert head is not None
        engine.fetch.offer(TP, n, head, value[:-3])
    engine.overflow.floods({TP}, 20)
    copy = next(c for c in engine.copies.take() if c.kind is CopyKind.OVERFLOW)
    letter = CODEC.decode_dead_letter(_router().record(copy, Shrink.SHORT_HISTORY).value)
    assert letter.reason == DeadLetterReason.UNDECODABLE.value and letter.envelope is None
    assert "could not be decoded" in letter.detail and "big-0" in letter.detail


def test_a_reader_without_a_decoder_says_so() -> None:
    job = _job()
    value = CODEC.encode(job)
    head = read_head(b"t", job_headers(job, value), value)
    assert head is not None
    with pytest.raises(DecodeError, match="no envelope decoder"):
        JobReader().full(Pending(TP, 0, 1, head, value))


# -- the consumer loop: fast path, slow path --------------------------------------


class _Engine:
    """Records what the loop offers."""

    def __init__(self) -> None:
        self.offered: list[tuple[int, JobHead]] = []

        self.batches: list[list[int]] = []  # offsets per call, one call per lock hold

    def offer(self, tp: TopicPart, offset: int, job: JobHead, envelope: bytes) -> None:
        self.offered.append((offset, job))
        self.batches.append([offset])

    def offer_many(self, records: list[tuple[TopicPart, int, JobHead, bytes]]) -> None:
        self.offered.extend((offset, head) for _, offset, head, _ in records)
        self.batches.append([offset for _, offset, _, _ in records])


def _loop(codec: EnvelopeCodec, engine: object, consumer: _Consumer) -> ConsumerLoop:
    """A consumer loop over fakes: ``engine`` records what the loop hands it."""
    return ConsumerLoop(
        consumer=consumer,  # type: ignore[arg-type]
        producer=None,  # type: ignore[arg-type]
        engine=with_ports(engine),  # type: ignore[arg-type]
        codec=codec,
        outbox=None,  # type: ignore[arg-type]
        topics=QueueTopics(queue="q"),
        gate=TierGate(DelayTiers(), QueueTopics(queue="q")),
        config=LoopConfig(),
    )


def test_the_loop_offers_a_record_with_headers_without_the_registry() -> None:
    """Registry mode with the registry down: a record with headers needs no schema at
    intake (it is not held, as one without headers is), and a record without
    headers still waits for its schema."""
    fake = FakeRegistry()
    writer = EnvelopeCodec(_registered(fake, None))
    job = _job(tenant_id="t", payload=writer.encode_payload("noop", {"n": 1}))
    value = writer.encode(job)
    fake.down = True
    engine, consumer = _Engine(), _Consumer()
    loop = _loop(EnvelopeCodec(ConfluentSchemaRegistry(fake)), engine, consumer)
    loop.fetcher.handle(_Message(41, value, job_headers(job, value)))  # type: ignore[arg-type]
    assert [(o, h.job_id, h.full) for o, h in engine.offered] == [(41, "j-1", None)]
    assert consumer.seeks == []
    loop.fetcher.handle(_Message(42, value))  # type: ignore[arg-type]  # no headers: held
    assert consumer.seeks == [("jobs.q", 0, 42)] and len(engine.offered) == 1


def test_the_loop_decodes_records_without_usable_headers() -> None:
    engine = _Engine()
    loop = _loop(CODEC, engine, _Consumer())
    job = _job(tenant_id="t")
    value = CODEC.encode(job)
    unknown = [(n, b"2" if n == H_VERSION else v) for n, v in job_headers(job, value)]
    loop.fetcher.handle(_Message(1, value))  # type: ignore[arg-type]
    loop.fetcher.handle(_Message(2, value, unknown))  # type: ignore[arg-type]
    loop.fetcher.handle(_Message(3, value, job_headers(job, value)))  # type: ignore[arg-type]
    assert [h.full is not None for _, h in engine.offered] == [True, True, False]
    assert all(h.job_id == "j-1" and h.payload(value) == job.payload for _, h in engine.offered)


def test_a_fetch_is_offered_under_one_lock_hold_and_in_offset_order() -> None:
    """Records read from their headers are offered together; a record that needs the
    slow path offers those before it first, so the engine never sees a later offset of
    a partition before an earlier one (it would drop the earlier one as fetched)."""
    engine = _Engine()
    loop = _loop(CODEC, engine, _Consumer())
    job = _job(tenant_id="t")
    value = CODEC.encode(job)
    due: list[tuple[TopicPart, int, JobHead, bytes]] = []
    for offset, headers in [(1, True), (2, True), (3, False), (4, True), (5, True)]:
        message = _Message(offset, value, job_headers(job, value) if headers else None)
        loop.fetcher.handle(message, due)  # type: ignore[arg-type]
    loop.fetcher.offer(due)
    assert [o for o, _ in engine.offered] == [1, 2, 3, 4, 5]
    assert engine.batches == [[1, 2], [3], [4, 5]]


# -- hops between delay tiers: byte for byte --------------------------------------


class _CountingCodec(EnvelopeCodec):
    def __init__(self) -> None:
        super().__init__(SchemaRegistry())
        self.decodes = 0

    def decode(self, data: bytes | None) -> Job:
        self.decodes += 1
        return super().decode(data)


class _TierMessage(_Message):
    """A record of the default class's 1h tier, produced ``produced_ms``."""

    def __init__(
        self, offset: int, value: bytes, headers: list[tuple[str, bytes]] | None, produced_ms: int
    ) -> None:
        super().__init__(offset, value, headers)
        self._produced_ms = produced_ms

    def topic(self) -> str:
        return "jobs.q.retry.1h"

    def timestamp(self) -> tuple[int, int]:
        return (1, self._produced_ms)


class _HopEngine:
    """Records the copies the loop asks for."""

    def __init__(self) -> None:
        self.copied: list[CopyRequest] = []

    def track_unoffered(self, tp: TopicPart, offset: int) -> int:
        return 1

    def copy(self, request: CopyRequest) -> None:
        self.copied.append(request)


def _hop_of(codec: _CountingCodec, job: Job, *, headers: bool) -> tuple[CopyRequest, bytes]:
    """The copy the loop makes of ``job`` released by the 1h tier 30 minutes early."""
    engine = _HopEngine()
    loop = _loop(codec, engine, _Consumer())
    value = codec.encode(job)
    produced = job.run_at_ms - 90 * 60_000  # its hour in the tier is over
    message = _TierMessage(5, value, job_headers(job, value) if headers else None, produced)
    loop.fetcher.handle(message)  # type: ignore[arg-type]
    (copy,) = engine.copied
    return copy, value


def test_a_hop_copies_the_fetched_record_without_decoding_it() -> None:
    """A job delayed by an hour and more hops to a shorter tier when its hour in the
    1h tier is over: the copy is the fetched value as it is (nothing about the job
    changes), its headers made from the head, and nothing is decoded."""
    codec = _CountingCodec()
    run_at = int(time.time() * 1000) + 30 * 60_000
    job = _job(tenant_id="t", attempt=2, run_at_ms=run_at, priority_class="critical")
    copy, value = _hop_of(codec, job, headers=True)
    assert (copy.kind, copy.tier, copy.job) == (CopyKind.HOP, "10m", None)
    router = KafkaRouter(codec=CODEC, topics=QueueTopics(queue="q"), tiers=DelayTiers(),
                         classes=("default", "critical"))  # fmt: skip
    record = router.record(copy)
    assert record.topic == "jobs.q.critical.retry.10m"  # its own class's tier
    assert record.value == value and record.key == b"t"
    head = read_head(record.key, list(record.headers), value)
    assert head is not None
    _same(head, job, record.value)
    assert codec.decodes == 0


def test_a_hop_of_a_record_without_headers_is_written_anew_with_headers() -> None:
    """An older producer's record (no headers) was decoded to be read: its hop is
    encoded from that job, once, and carries headers from then on."""
    codec = _CountingCodec()
    run_at = int(time.time() * 1000) + 30 * 60_000
    job = _job(tenant_id="t", run_at_ms=run_at)
    copy, _ = _hop_of(codec, job, headers=False)
    assert copy.job == job and codec.decodes == 1
    record = _router().record(copy)
    assert record.topic == "jobs.q.retry.10m" and record.value is not None
    head = read_head(record.key, list(record.headers), record.value)
    assert head is not None and head.run_at_ms == run_at


def test_a_byte_for_byte_hop_too_large_for_its_tier_dies_as_its_decoded_job() -> None:
    codec = _CountingCodec()
    run_at = int(time.time() * 1000) + 30 * 60_000
    copy, _ = _hop_of(codec, _job(tenant_id="t", run_at_ms=run_at), headers=True)
    assert copy.job is None and copy.raw_value is not None  # sent byte for byte
    letter = CODEC.decode_dead_letter(_router().record(copy, Shrink.SHORT_HISTORY).value)
    assert letter.reason == DeadLetterReason.TOO_LARGE.value
    assert "hop copy was too large for jobs.q.retry.10m" in letter.detail
    assert CODEC.decode(letter.envelope).job_id == "j-1"
