"""The enqueue API against a real broker: where records land, what they hold, what is refused."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest

from jobcore.delay_tiers import DEFAULT_TIERS
from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaSettings,
    Message,
    TopicPartition,
    end_offsets,
    make_admin,
    make_consumer,
)
from jobcore.topics import QueueTopics
from producer import EnqueueError, JobProducer, JobRequest, PayloadError, ensure_queue_topics
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

PARTITIONS = 3
NOW = 1_700_000_000.0
RECEIPT = {"order_id": 7, "email": "a@example.com", "amount_cents": 1999}


@pytest.fixture
def queue(kafka: KafkaSettings, unique: str) -> str:
    name = f"q{unique}"
    ensure_queue_topics(kafka, name, partitions=PARTITIONS)
    return name


@pytest.fixture
def codec() -> EnvelopeCodec:
    return EnvelopeCodec(SchemaRegistry())


def written(kafka: KafkaSettings, topic: str) -> int:
    consumer = make_consumer(kafka, f"probe-{topic}")
    try:
        return sum(end_offsets(consumer, topic, range(PARTITIONS)).values())
    finally:
        consumer.close()


def read_all(kafka: KafkaSettings, topic: str, count: int) -> list[Message]:
    """Every record of ``topic`` from the beginning, waiting up to 30 s for ``count``."""
    consumer = make_consumer(kafka, f"reader-{topic}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got: list[Message] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg)
    finally:
        consumer.close()
    return got


def test_an_enqueued_job_lands_on_the_ready_topic_keyed_by_tenant(
    kafka: KafkaSettings, queue: str, codec: EnvelopeCodec
) -> None:
    with JobProducer(kafka, clock=lambda: NOW) as producer:
        job_id = producer.enqueue(
            queue, "send_receipt", RECEIPT, tenant_id="acme", dedupe_key="order-7", priority=2
        )

    [msg] = read_all(kafka, f"jobs.{queue}", 1)
    assert msg.key() == b"acme"
    assert dict(msg.headers() or []) == {"job_id": job_id.encode()}
    job = codec.decode(msg.value())
    assert job == Job(
        job_id=job_id,
        queue=queue,
        tenant_id="acme",
        type="send_receipt",
        payload=job.payload,
        priority=2,
        run_at_ms=int(NOW * 1000),
        dedupe_key="order-7",
        created_at_ms=int(NOW * 1000),
    )
    assert codec.decode_payload("send_receipt", job.payload) == {**RECEIPT, "currency": "EUR"}


def test_a_bad_payload_raises_and_sends_nothing(kafka: KafkaSettings, queue: str) -> None:
    good = JobRequest(queue=queue, type="send_receipt", payload=RECEIPT, tenant_id="acme")
    bad = JobRequest(
        queue=queue, type="send_receipt", payload={**RECEIPT, "amount_cents": "abc"}, tenant_id="a"
    )
    with JobProducer(kafka) as producer:
        with pytest.raises(
            PayloadError, match=r"send_receipt payload: field 'order_id' is required"
        ):
            producer.enqueue(queue, "send_receipt", {"email": "x"}, tenant_id="acme")
        with pytest.raises(PayloadError, match=r"request 2: .* field 'amount_cents' expected long"):
            producer.enqueue_batch([good, good, bad, good])
        with pytest.raises(PayloadError, match="no schema for job type 'nope'"):
            producer.enqueue_nowait(queue, "nope", {}, tenant_id="acme")
        producer.flush()

    assert written(kafka, f"jobs.{queue}") == 0


def test_a_batch_of_a_thousand_jobs_is_acknowledged(
    kafka: KafkaSettings, queue: str, codec: EnvelopeCodec
) -> None:
    requests = [
        JobRequest(queue=queue, type="noop", payload={"n": i}, tenant_id=f"tenant-{i % 7}")
        for i in range(1000)
    ]
    with JobProducer(kafka) as producer:
        ids = producer.enqueue_batch(requests)

    assert len(set(ids)) == 1000
    assert written(kafka, f"jobs.{queue}") == 1000
    messages = read_all(kafka, f"jobs.{queue}", 1000)
    jobs = [codec.decode(m.value()) for m in messages]
    assert {j.job_id for j in jobs} == set(ids)
    partitions: dict[str, set[int]] = defaultdict(set)
    for msg, job in zip(messages, jobs, strict=True):
        partition = msg.partition()
        assert partition is not None
        partitions[job.tenant_id].add(partition)
        assert msg.key() == job.tenant_id.encode()
    assert all(len(p) == 1 for p in partitions.values()), "a tenant spans partitions"
    n_by_tenant: dict[str, list[int]] = defaultdict(list)
    for job in jobs:
        n_by_tenant[job.tenant_id].append(codec.decode_payload("noop", job.payload)["n"])
    assert all(ns == sorted(ns) for ns in n_by_tenant.values()), "a tenant's jobs reordered"


def test_enqueue_nowait_resolves_on_delivery(kafka: KafkaSettings, queue: str) -> None:
    with JobProducer(kafka) as producer:
        futures = [
            producer.enqueue_nowait(queue, "noop", {"n": i}, tenant_id="acme") for i in range(50)
        ]
        producer.flush()
        assert all(f.done() for f in futures)
        ids = [f.result() for f in futures]
        # The background thread serves delivery reports: no flush needed to resolve.
        late = producer.enqueue_nowait(queue, "noop", {}, tenant_id="acme")
        assert late.result(timeout=30) not in ids
        asyncio.run(producer.flush_async())

    assert len(set(ids)) == 50
    assert written(kafka, f"jobs.{queue}") == 51


def test_a_queue_without_topics_fails_fast(kafka: KafkaSettings, unique: str) -> None:
    started = time.monotonic()
    with JobProducer(kafka) as producer, pytest.raises(EnqueueError, match="create-queue"):
        producer.enqueue(f"missing{unique}", "noop", {}, tenant_id="acme")
    assert time.monotonic() - started < 15


def test_a_closed_producer_refuses_jobs(kafka: KafkaSettings, queue: str) -> None:
    producer = JobProducer(kafka)
    producer.close()
    producer.close()  # closing twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        producer.enqueue(queue, "noop", {}, tenant_id="acme")


def test_a_custom_prefix_selects_the_topics(kafka: KafkaSettings, unique: str) -> None:
    topics = QueueTopics(queue=f"q{unique}", prefix="staging")
    assert ensure_queue_topics(kafka, topics.queue, partitions=1, prefix="staging") == [
        topics.ready,
        topics.dlq,
        *(topics.retry(t) for t in DEFAULT_TIERS),
    ]
    with JobProducer(kafka, prefix="staging") as producer:
        producer.enqueue(topics.queue, "noop", {}, tenant_id="acme")
    consumer = make_consumer(kafka, f"probe-{unique}")
    try:
        assert end_offsets(consumer, topics.ready, [0]) == {0: 1}
    finally:
        consumer.close()


def test_ensure_queue_topics_is_idempotent(kafka: KafkaSettings, unique: str) -> None:
    queue = f"q{unique}"
    first = ensure_queue_topics(kafka, queue, partitions=4)
    again = ensure_queue_topics(kafka, queue, partitions=4)

    assert (
        first
        == again
        == [
            f"jobs.{queue}",
            f"jobs.{queue}.dlq",
            *(f"jobs.{queue}.retry.{t}" for t in DEFAULT_TIERS),
        ]
    )
    metadata = make_admin(kafka).list_topics(timeout=10)
    assert {len(metadata.topics[name].partitions) for name in first} == {4}
    with pytest.raises(ValueError, match="already exists with 4 partitions, not 2"):
        ensure_queue_topics(kafka, queue, partitions=2)
