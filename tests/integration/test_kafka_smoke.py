"""The broker the project runs is real Kafka, and the client settings we rely on hold."""

from __future__ import annotations

import time
from collections import defaultdict

from jobcore.kafka import (
    KafkaSettings,
    Message,
    TopicPartition,
    TopicSpec,
    committed_offsets,
    create_topics,
    end_offsets,
    make_admin,
    make_consumer,
    make_producer,
    produce_reliably,
)

RECORDS = 10_000
KEYS = 20
PARTITIONS = 4


def _produce_keyed(kafka: KafkaSettings, topic: str) -> None:
    producer = make_producer(kafka)
    failures: list[str] = []

    def delivered(err: object, msg: Message) -> None:
        if err is not None:
            failures.append(str(err))

    for seq in range(RECORDS):
        key = f"tenant-{seq % KEYS}".encode()
        produce_reliably(producer, topic, key=key, value=f"{seq}".encode(), on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failures == []


def _consume(kafka: KafkaSettings, topic: str, group: str, limit: int) -> list[Message]:
    """Read up to ``limit`` records, committing explicitly after each batch."""
    consumer = make_consumer(kafka, group)
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < limit and time.monotonic() < deadline:
            batch = consumer.consume(num_messages=min(500, limit - len(got)), timeout=1.0)
            for msg in batch:
                assert msg.error() is None, msg.error()
            got.extend(batch)
            if batch:
                last: dict[int, int] = {}
                for msg in batch:
                    last[msg.partition()] = msg.offset()
                offsets = [TopicPartition(topic, p, o + 1) for p, o in last.items()]
                consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()
    return got


def test_admin_creates_topics_with_partitions(kafka: KafkaSettings, unique: str) -> None:
    topic = f"smoke.create.{unique}"
    create_topics(
        kafka, [TopicSpec(name=topic, partitions=PARTITIONS, config={"retention.ms": "3600000"})]
    )
    metadata = make_admin(kafka).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == PARTITIONS
    # Creating it again is not an error: queue set-up must be repeatable.
    create_topics(kafka, [TopicSpec(name=topic, partitions=PARTITIONS)])


def test_keyed_records_round_trip_in_order_with_manual_commits(
    kafka: KafkaSettings, unique: str
) -> None:
    topic = f"smoke.order.{unique}"
    create_topics(kafka, [TopicSpec(name=topic, partitions=PARTITIONS)])
    _produce_keyed(kafka, topic)

    got = _consume(kafka, topic, f"smoke-{unique}", RECORDS)

    assert len(got) == RECORDS
    assert sorted(int(m.value()) for m in got) == list(range(RECORDS))
    partitions_of_key: dict[bytes, set[int]] = defaultdict(set)
    seqs_of_key: dict[bytes, list[int]] = defaultdict(list)
    for msg in got:
        partitions_of_key[msg.key()].add(msg.partition())
        seqs_of_key[msg.key()].append(int(msg.value()))
    assert all(len(parts) == 1 for parts in partitions_of_key.values()), "a key spans partitions"
    for key, seqs in seqs_of_key.items():
        assert seqs == sorted(seqs), f"records of {key!r} arrived out of order"


def test_committed_offsets_survive_a_consumer_restart(kafka: KafkaSettings, unique: str) -> None:
    topic = f"smoke.restart.{unique}"
    group = f"smoke-restart-{unique}"
    create_topics(kafka, [TopicSpec(name=topic, partitions=PARTITIONS)])
    _produce_keyed(kafka, topic)

    first = _consume(kafka, topic, group, RECORDS // 2)
    probe = make_consumer(kafka, f"probe-{unique}")
    committed = committed_offsets(make_consumer(kafka, group), topic, range(PARTITIONS))
    high = end_offsets(probe, topic, range(PARTITIONS))
    probe.close()
    assert sum(max(o, 0) for o in committed.values()) == len(first)

    second = _consume(kafka, topic, group, RECORDS - len(first))

    # The restarted member resumes exactly at the committed offsets: no record
    # is read twice and none is skipped.
    first_offsets = {(m.partition(), m.offset()) for m in first}
    second_offsets = {(m.partition(), m.offset()) for m in second}
    assert not first_offsets & second_offsets
    for partition in range(PARTITIONS):
        resumed = [m.offset() for m in second if m.partition() == partition]
        if resumed:
            assert min(resumed) == max(committed[partition], 0)
    assert len(first_offsets | second_offsets) == sum(high.values()) == RECORDS
