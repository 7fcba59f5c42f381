"""Durable copies that Kafka refuses, against a real broker: a retry copy larger than
its tier topic accepts (and a dead letter larger than the DLQ accepts) ends in the
DLQ without its payload, the partition's commit moves past it, and the leasekeeper
keeps running.

The leasekeeper runs in-process and the test plays the worker through the engine
(claim, nack, ack), so only the copy path meets Kafka's limits.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import (
    KafkaSettings,
    TopicSpec,
    committed_offsets,
    create_topics,
    make_consumer,
    make_producer,
)
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import Grant, SettleKind, Settlement
from leasekeeper.engine import EngineConfig
from leasekeeper.ops.service import LeaseKeeperService, ServeConfig
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import DeadLetter, Job
from tests.system import wait_until

CODEC = EnvelopeCodec(SchemaRegistry())
SMALL = "4096"  # max.message.bytes of the tier topics and the DLQ


@pytest.fixture
def service(kafka: KafkaSettings, unique: str, tmp_path: Path) -> Iterator[LeaseKeeperService]:
    queue = f"copies-{unique}"
    topics = QueueTopics(queue=queue)
    tiers = DelayTiers()
    small = {"max.message.bytes": SMALL}
    create_topics(
        kafka,
        [
            TopicSpec(name=topics.ready, partitions=1),
            TopicSpec(name=topics.dlq, partitions=1, config=small),
            *(TopicSpec(name=t, partitions=1, config=small) for t in tiers.topics(topics)),
        ],
    )
    config = ServeConfig(
        queue=queue,
        kafka=kafka,
        state_dir=tmp_path / "state",
        listen=f"unix:{tmp_path}/lk.sock",
        engine=EngineConfig(lease_s=30),
        tiers=tiers,
        session_timeout_ms=6_000,
    )
    lk = LeaseKeeperService(config)
    lk.start()
    try:
        yield lk
    finally:
        lk.stop()


def enqueue(kafka: KafkaSettings, topic: str, payload: bytes) -> str:
    job_id = uuid.uuid4().hex
    job = Job(job_id=job_id, queue="q", tenant_id="acme", type="report", payload=payload,
              created_at_ms=int(time.time() * 1000))  # fmt: skip
    producer = make_producer(kafka)
    producer.produce(topic, key=b"acme", value=CODEC.encode(job))
    assert producer.flush(10) == 0
    return job_id


def claim_one(service: LeaseKeeperService, timeout: float = 30) -> Grant:
    """The next job, as a worker's long poll gets it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        grants = service.engine.workers.claim("w", 1, wait_s=1.0)
        if grants:
            return grants[0]
    raise AssertionError(f"no job to claim within {timeout:.0f}s")


def read_dead_letters(kafka: KafkaSettings, topic: str) -> list[DeadLetter]:
    consumer = make_consumer(kafka, f"reader-{uuid.uuid4().hex}")
    consumer.subscribe([topic])
    letters: list[DeadLetter] = []
    deadline = time.monotonic() + 30
    while not letters and time.monotonic() < deadline:
        letters = [CODEC.decode_dead_letter(m.value()) for m in consumer.consume(10, timeout=0.5)
                   if m.error() is None]  # fmt: skip
    consumer.close()
    return letters


def committed(kafka: KafkaSettings, service: LeaseKeeperService) -> int:
    consumer = make_consumer(kafka, service.topics.consumer_group)
    try:
        return committed_offsets(consumer, service.topics.ready, [0])[0]
    finally:
        consumer.close()


def test_a_nack_copy_too_large_for_kafka_ends_in_the_dlq_and_the_commit_moves_on(
    kafka: KafkaSettings, service: LeaseKeeperService
) -> None:
    payload = os.urandom(8_000)  # incompressible: larger than the tier topics and the DLQ take
    big = enqueue(kafka, service.topics.ready, payload)
    grant = claim_one(service)
    nack = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK,
                      error_class="TimeoutError", message="partner API timed out")  # fmt: skip
    assert service.engine.workers.settle([nack])[0].ok

    (letter,) = read_dead_letters(kafka, service.topics.dlq)
    assert letter.reason == "too large" and letter.envelope is not None
    dead = CODEC.decode(letter.envelope)
    assert (dead.job_id, dead.type, dead.tenant_id, dead.payload) == (big, "report", "acme", b"")
    assert [e.error_class for e in dead.errors] == ["TimeoutError"]
    wait_until(lambda: committed(kafka, service) == 1, 30, "the commit past the big job")

    # The leasekeeper keeps running: the next job is served and committed.
    enqueue(kafka, service.topics.ready, b"small")
    after = claim_one(service)
    ack = Settlement(lease_id=after.lease_id, token=after.token, outcome=SettleKind.ACK)
    assert service.engine.workers.settle([ack])[0].ok
    wait_until(lambda: committed(kafka, service) == 2, 30, "the commit past the next job")
    assert not service.wait(0)
    assert service.snapshot().engine.counters.dead == 1
