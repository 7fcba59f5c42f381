"""The enqueue API against a real broker: where records land, what they hold, what is refused."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from jobcore.control import Cancellation
from jobcore.delay_tiers import DEFAULT_TIERS, DelayTiers
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
from producer import (
    CancelError,
    EnqueueError,
    JobProducer,
    JobRequest,
    PayloadError,
    ensure_queue_topics,
)
from producer.cli import main as producer_cli
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.job_headers import read_head

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


def written(kafka: KafkaSettings, topic: str, partitions: int = PARTITIONS) -> int:
    consumer = make_consumer(kafka, f"probe-{topic}")
    try:
        return sum(end_offsets(consumer, topic, range(partitions)).values())
    finally:
        consumer.close()


def read_all(
    kafka: KafkaSettings, topic: str, count: int, partitions: int = PARTITIONS
) -> list[Message]:
    """Every record of ``topic`` from the beginning, waiting up to 30 s for ``count``."""
    consumer = make_consumer(kafka, f"reader-{topic}")
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
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
            queue, "send_receipt", RECEIPT, tenant_id="acme", dedupe_key="order-7"
        )

    [msg] = read_all(kafka, f"jobs.{queue}", 1)
    assert msg.key() == b"acme"
    assert dict(msg.headers() or [])["job_id"] == job_id.encode()
    head = read_head(msg.key(), msg.headers(), msg.value() or b"")  # type: ignore[arg-type]
    assert head is not None  # the leasekeeper reads it without decoding the envelope
    assert (head.job_id, head.tenant_id, head.type, head.dedupe_key) == (
        job_id, "acme", "send_receipt", "order-7",
    )  # fmt: skip
    job = codec.decode(msg.value())
    assert head.payload(msg.value() or b"") == job.payload
    assert job == Job(
        job_id=job_id,
        queue=queue,
        tenant_id="acme",
        type="send_receipt",
        payload=job.payload,
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
        "staging." + topics.queue + ".critical",  # the priority classes honour the prefix
        "staging." + topics.queue + ".bulk",
        topics.overflow,
        topics.dlq,
        *(topics.retry(t) for t in DEFAULT_TIERS),
        # each class's own delay tiers, under the prefix too
        *(
            f"staging.{topics.queue}.{c}.retry.{t}"
            for c in ("critical", "bulk")
            for t in DEFAULT_TIERS
        ),
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
            f"jobs.{queue}.critical",
            f"jobs.{queue}.bulk",
            f"jobs.{queue}.overflow",
            f"jobs.{queue}.dlq",
            *(f"jobs.{queue}.retry.{t}" for t in DEFAULT_TIERS),
            *(f"jobs.{queue}.{c}.retry.{t}" for c in ("critical", "bulk") for t in DEFAULT_TIERS),
        ]
    )
    metadata = make_admin(kafka).list_topics(timeout=10)
    assert {len(metadata.topics[name].partitions) for name in first} == {4}
    with pytest.raises(ValueError, match="already exists with 4 partitions, not 2"):
        ensure_queue_topics(kafka, queue, partitions=2)


# -- delayed jobs and cancellations ---------------------------------------------------------


def test_a_delayed_job_lands_on_its_delay_tier_with_its_due_time(
    kafka: KafkaSettings, queue: str, codec: EnvelopeCodec
) -> None:
    with JobProducer(kafka, clock=lambda: NOW) as producer:
        later = producer.enqueue(
            queue, "noop", {"n": 1}, tenant_id="acme", delay=timedelta(minutes=10)
        )
        at = producer.enqueue(
            queue,
            "noop",
            {"n": 2},
            tenant_id="acme",
            run_at=datetime.fromtimestamp(NOW + 90, tz=UTC),
        )

    [msg] = read_all(kafka, f"jobs.{queue}.retry.10m", 1)
    assert msg.key() == b"acme"
    assert dict(msg.headers() or [])["job_id"] == later.encode()
    head = read_head(msg.key(), msg.headers(), msg.value() or b"")  # type: ignore[arg-type]
    assert head is not None and head.run_at_ms == int(NOW * 1000) + 600_000
    job = codec.decode(msg.value())
    assert (job.job_id, job.created_at_ms, job.run_at_ms) == (
        later,
        int(NOW * 1000),
        int(NOW * 1000) + 600_000,
    )
    [msg] = read_all(kafka, f"jobs.{queue}.retry.1m", 1)
    job = codec.decode(msg.value())
    assert (job.job_id, job.run_at_ms) == (at, int(NOW * 1000) + 90_000)
    assert written(kafka, f"jobs.{queue}") == 0, "a delayed job reached the ready topic"


def test_a_batch_sends_each_job_to_its_own_topic_in_the_tenants_partition(
    kafka: KafkaSettings, queue: str, codec: EnvelopeCodec
) -> None:
    waits = {"now": None, "1s": 0.2, "10s": 12.0, "1h": timedelta(days=30)}
    requests = [
        JobRequest(queue=queue, type="noop", payload={"n": n}, tenant_id="acme", delay=wait)
        for n, wait in enumerate(waits.values())
    ]
    with JobProducer(kafka, clock=lambda: NOW) as producer:
        ids = producer.enqueue_batch(requests)

    [ready] = read_all(kafka, f"jobs.{queue}", 1)
    for (tier, wait), job_id in zip(waits.items(), ids, strict=True):
        topic = f"jobs.{queue}" if wait is None else f"jobs.{queue}.retry.{tier}"
        [msg] = read_all(kafka, topic, 1)
        assert msg.partition() == ready.partition(), f"{topic}: not the tenant's partition"
        assert codec.decode(msg.value()).job_id == job_id, topic


def test_a_producer_whose_tiers_have_no_topics_fails_fast_and_sends_nothing(
    kafka: KafkaSettings, queue: str
) -> None:
    due = JobRequest(queue=queue, type="noop", payload={}, tenant_id="acme")
    delayed = JobRequest(queue=queue, type="noop", payload={}, tenant_id="acme", delay=3)
    with JobProducer(kafka, tiers=DelayTiers.parse("1s,3s")) as producer:
        with pytest.raises(EnqueueError, match=rf"no delay tier topic jobs\.{queue}\.retry\.3s"):
            producer.enqueue_batch([due, delayed])
        with pytest.raises(EnqueueError, match=r"tiers \(1s,3s\) must be the leasekeeper's"):
            producer.enqueue(queue, "noop", {}, tenant_id="acme", delay=3)
        producer.enqueue(queue, "noop", {}, tenant_id="acme", delay=1)  # 1s exists

    assert written(kafka, f"jobs.{queue}") == 0
    assert written(kafka, f"jobs.{queue}.retry.1s") == 1


def test_cancel_records_the_cancellation_on_the_control_topic(
    kafka: KafkaSettings, queue: str
) -> None:
    with JobProducer(kafka, clock=lambda: NOW) as producer:
        job_id = producer.enqueue(queue, "noop", {}, tenant_id="acme", delay=600)
        producer.record_cancellation(queue, job_id, reason="customer changed their mind")
        producer.record_cancellation(queue, "unknown-id")  # recorded all the same: harmless

    first, second = read_all(kafka, f"jobs.{queue}.control", 2, partitions=1)
    assert first.key() == job_id.encode()
    assert Cancellation.decode(first.value()) == Cancellation(
        job_id=job_id, cancelled_at_ms=int(NOW * 1000), reason="customer changed their mind"
    )
    assert (second.key(), Cancellation.decode(second.value()).reason) == (b"unknown-id", "")


def test_cancel_on_a_queue_without_topics_raises(kafka: KafkaSettings, unique: str) -> None:
    with JobProducer(kafka) as producer:
        with pytest.raises(CancelError, match=r"no control topic .*producer create-queue"):
            producer.cancel(f"missing{unique}", "some-job")
        with pytest.raises(ValueError, match="job_id must be a non-empty string"):
            producer.cancel(f"missing{unique}", "")


def test_the_cli_enqueues_later_and_cancels(
    kafka: KafkaSettings, queue: str, codec: EnvelopeCodec
) -> None:
    def cli(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(
            producer_cli, [*args, "--bootstrap", kafka.bootstrap], env={"JOBS_TOPIC_PREFIX": "jobs"}
        )
        assert result.exit_code == code, result.output
        return result.output.strip()

    enqueue = ("enqueue", queue, "noop", "--tenant", "acme", "--payload", "{}")
    before_ms = int(time.time() * 1000)
    in_ten = cli(*enqueue, "--delay", "10m")
    at = datetime.fromtimestamp(before_ms // 1000 + 2 * 3600, tz=UTC)
    at_job = cli(*enqueue, "--at", at.strftime("%Y-%m-%dT%H:%M:%SZ"))
    # No leasekeeper runs: nobody can say the job was stopped, only that it will be.
    answer = cli("cancel", queue, at_job, "--reason", "not needed", "--wait", "0", code=6)
    assert answer == (
        f"job {at_job} not found yet: cancellation recorded; it will be skipped if it "
        "appears within 35 days"
    )

    [msg] = read_all(kafka, f"jobs.{queue}.retry.10m", 1)
    job = codec.decode(msg.value())
    assert job.job_id == in_ten
    assert before_ms + 600_000 <= job.run_at_ms <= int(time.time() * 1000) + 600_000
    [msg] = read_all(kafka, f"jobs.{queue}.retry.1h", 1)
    job = codec.decode(msg.value())
    assert (job.job_id, job.run_at_ms) == (at_job, int(at.timestamp()) * 1000)
    [control] = read_all(kafka, f"jobs.{queue}.control", 1, partitions=1)
    cancellation = Cancellation.decode(control.value())
    assert (control.key(), cancellation.job_id, cancellation.reason) == (
        at_job.encode(),
        at_job,
        "not needed",
    )

    assert "--delay or --at, not both" in cli(
        *enqueue, "--delay", "1m", "--at", "2030-01-01T00:00:00Z", code=2
    )
    assert "invalid delay '10 minutes'" in cli(*enqueue, "--delay", "10 minutes", code=2)
    assert "has no offset: add Z" in cli(*enqueue, "--at", "2030-01-01T09:00:00", code=2)
    assert "at most 30 days" in cli(*enqueue, "--delay", "31d", code=1)
    assert written(kafka, f"jobs.{queue}") == 0
