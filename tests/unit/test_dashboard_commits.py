"""The dashboard reads a queue's committed offsets with a consumer of the queue's group
that never joins it, never with the admin client's ListConsumerGroupOffsets: librdkafka
2.16 dereferences an admin client's missing consumer group when that answer says the
coordinator is still loading (a broker just started), and the dashboard died by
SIGSEGV at start (a core dump showed ``rd_kafka_cgrp_op`` from
``rd_kafka_handle_OffsetFetch`` in the admin worker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobcore.kafka import KafkaSettings, TopicPartition, make_consumer, make_producer
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.dashboard.kafka_view import KafkaView
from memkafka import Cluster, MemoryAdmin, installed

SETTINGS = KafkaSettings(bootstrap="memory")
TOPICS = QueueTopics(queue="q")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as memory:
        ensure_queue_topics(SETTINGS, "q", partitions=2)
        yield memory


def test_lag_comes_from_the_groups_commits_read_by_a_consumer(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(self: MemoryAdmin, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the admin client's ListConsumerGroupOffsets crashes librdkafka")

    monkeypatch.setattr(MemoryAdmin, "list_consumer_group_offsets", refused)
    producer = make_producer(SETTINGS)
    for _ in range(5):
        producer.produce(TOPICS.ready, value=b"job", partition=0)
    producer.flush(5)
    group = make_consumer(SETTINGS, TOPICS.consumer_group)
    group.commit(offsets=[TopicPartition(TOPICS.ready, 0, 3)], asynchronous=False)
    group.close()

    ready = KafkaView(SETTINGS, "jobs").offsets("q").ready
    assert [(p.partition, p.committed, p.end, p.lag) for p in ready] == [
        (0, 3, 5, 2),
        (1, -1, 0, 0),
    ]
