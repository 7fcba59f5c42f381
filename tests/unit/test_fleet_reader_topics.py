"""The dashboard's fleet reader assigns a topic only once it exists: a partition of a
missing topic, fetched for the process's life, is what the dashboard alone did
before it was seen to crash in librdkafka's main thread."""

from __future__ import annotations

from typing import Any

from jobcore.kafka import KafkaException, TopicPartition
from leasekeeper.dashboard.fleet_view import FleetReader


class Metadata:
    def __init__(self, topics: set[str]) -> None:
        self.topics = {name: object() for name in topics}


class Consumer:
    def __init__(self, topics: set[str] | None) -> None:
        self.topics = topics
        self.assigned: list[TopicPartition] = []

    def list_topics(self, timeout: float) -> Metadata:
        if self.topics is None:
            raise KafkaException("unreachable")
        return Metadata(self.topics)

    def incremental_assign(self, partitions: list[Any]) -> None:
        self.assigned += partitions


def test_only_existing_topics_are_assigned_and_the_rest_looked_for_again() -> None:
    consumer = Consumer({"jobs._leasekeepers", "jobs.other"})
    left = FleetReader._assign_existing(consumer, {"jobs._leasekeepers", "jobs._outbox_relays"})
    assert left == {"jobs._outbox_relays"}
    assert [tp.topic for tp in consumer.assigned] == ["jobs._leasekeepers"]

    consumer.topics = {"jobs._leasekeepers", "jobs._outbox_relays"}
    assert FleetReader._assign_existing(consumer, left) == set()
    assert [tp.topic for tp in consumer.assigned] == ["jobs._leasekeepers", "jobs._outbox_relays"]


def test_kafka_unreachable_assigns_nothing_and_keeps_looking() -> None:
    consumer = Consumer(None)
    assert FleetReader._assign_existing(consumer, {"jobs._leasekeepers"}) == {"jobs._leasekeepers"}
    assert consumer.assigned == []
