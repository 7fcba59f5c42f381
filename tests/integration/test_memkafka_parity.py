"""The in-memory cluster (``memkafka``) behaves as the real broker does, side by side.

Each scenario runs twice through the same ``jobcore.kafka`` factories: once against
the broker, once with a memory cluster installed, and the two answers must match.
The unit tests of ``memkafka`` hard-code the partitions this test proves.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest

from jobcore.kafka import (
    KafkaException,
    KafkaSettings,
    Message,
    TopicPartition,
    TopicSpec,
    create_topics,
    make_consumer,
    make_producer,
)
from memkafka import Cluster, installed

pytestmark = pytest.mark.kafka

PARTITIONS = 6
# The partition librdkafka's default partitioner gives each key over six partitions;
# tests/unit/test_memkafka.py asserts the memory cluster gives the same.
KEY_PARTITIONS = {b"tenant-0": 3, b"tenant-1": 1, b"acme": 2, b"job-42": 5, b"x": 3}


@contextmanager
def _backend(kafka: KafkaSettings, memory: bool) -> Iterator[None]:
    with installed(Cluster()) if memory else nullcontext():
        yield


def _topic(kafka: KafkaSettings, partitions: int = PARTITIONS) -> str:
    name = f"parity-{uuid.uuid4().hex[:8]}"
    create_topics(kafka, [TopicSpec(name=name, partitions=partitions, replication=1)])
    return name


def _keyed_partitions(kafka: KafkaSettings) -> dict[bytes, int]:
    topic = _topic(kafka)
    producer = make_producer(kafka)
    landed: dict[bytes, int] = {}

    def delivered(err: Any, msg: Message) -> None:
        assert err is None, err
        landed[msg.key()] = msg.partition()

    for key in KEY_PARTITIONS:
        producer.produce(topic, value=b"v", key=key, on_delivery=delivered)
    assert producer.flush(30) == 0
    return landed


def _consume_until(consumer: Any, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.consume(count - len(got), timeout=0.5)
    return got


def _commit_and_seek(kafka: KafkaSettings) -> dict[str, Any]:
    """Commit with metadata, read it back; pause stops a partition, seek rewinds it."""
    topic = _topic(kafka, partitions=1)
    producer = make_producer(kafka)
    for n in range(5):
        producer.produce(topic, value=str(n).encode(), partition=0)
    producer.flush(30)
    group = f"parity-{uuid.uuid4().hex[:8]}"
    consumer = make_consumer(kafka, group)
    tp = TopicPartition(topic, 0)
    consumer.assign([TopicPartition(topic, 0, 0)])
    first = [m.offset() for m in _consume_until(consumer, 3)][:3]
    consumer.commit(offsets=[TopicPartition(topic, 0, 3, "span:7")], asynchronous=False)
    (back,) = consumer.committed([tp], timeout=10)
    consumer.pause([tp])
    paused = consumer.consume(10, timeout=0.5)
    consumer.resume([tp])
    consumer.seek(TopicPartition(topic, 0, 1))
    after_seek = [m.offset() for m in _consume_until(consumer, 4)]
    position = consumer.position([tp])[0].offset
    consumer.close()
    return {
        "first": first,
        "committed": (back.offset, back.metadata),
        "paused": len(paused),
        "after_seek": after_seek,
        "position": position,
    }


def _metadata_limit(kafka: KafkaSettings) -> dict[str, Any]:
    """The broker's ``offset.metadata.max.bytes`` (4096 by default) refuses a commit
    whose metadata reaches it: 4095 bytes are taken, 4096 are not."""
    topic = _topic(kafka, partitions=1)
    consumer = make_consumer(kafka, f"parity-{uuid.uuid4().hex[:8]}")
    found: dict[str, Any] = {}
    for size in (4095, 4096):
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, 1, "m" * size)], asynchronous=False)
            found[str(size)] = None
        except KafkaException as exc:
            found[str(size)] = exc.args[0].code()
    consumer.close()
    return found


def _second_member(kafka: KafkaSettings) -> dict[str, Any]:
    """Two members of one group (the eager range assignor): the first gives
    everything back and gets its half again; the second gets the other half."""
    topic = _topic(kafka, partitions=4)
    group = f"parity-{uuid.uuid4().hex[:8]}"
    events: list[tuple[str, str, list[int]]] = []

    def member(name: str) -> Any:
        consumer = make_consumer(kafka, group, **{"client.id": name})

        def assigned(_: Any, tps: list[TopicPartition]) -> None:
            events.append((name, "assign", sorted(tp.partition for tp in tps)))

        def revoked(_: Any, tps: list[TopicPartition]) -> None:
            events.append((name, "revoke", sorted(tp.partition for tp in tps)))

        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
        return consumer

    first = member("a")
    deadline = time.monotonic() + 30
    while not events and time.monotonic() < deadline:
        first.consume(1, timeout=0.2)
    second = member("b")
    while len(events) < 4 and time.monotonic() < deadline:
        first.consume(1, timeout=0.1)
        second.consume(1, timeout=0.1)
    held = {c: sorted(tp.partition for tp in c.assignment()) for c in (first, second)}
    result = {"events": sorted(events), "sizes": sorted(len(p) for p in held.values())}
    second.close()
    first.close()
    return result


SCENARIOS = [_keyed_partitions, _commit_and_seek, _metadata_limit, _second_member]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_the_memory_cluster_answers_as_the_broker_does(kafka: KafkaSettings, scenario: Any) -> None:
    real = scenario(kafka)
    with _backend(kafka, memory=True):
        memory = scenario(kafka)
    assert memory == real


def test_the_hard_coded_partitions_are_the_brokers(kafka: KafkaSettings) -> None:
    assert _keyed_partitions(kafka) == KEY_PARTITIONS
