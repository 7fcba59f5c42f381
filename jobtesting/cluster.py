"""The in-memory cluster a ``MemoryQueue`` runs on: queues made on first use, and the
order in which records were written across all topics.

A test should not have to run ``producer create-queue`` first: the first look-up of
a queue's topic (the producer checks it exists before its first enqueue) creates
the queue's topics as ``create-queue`` would, with one partition each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaSettings
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import DEFAULT_PREFIX, QueueTopics
from memkafka import Cluster
from memkafka.cluster import PartitionLog
from memkafka.records import Headers

__all__ = ["QueueCluster", "Written"]

Written = tuple[str, int, int]  # topic, partition, offset


class QueueCluster(Cluster):
    def __init__(
        self,
        *,
        clock: Callable[[], float],
        settings: KafkaSettings,
        tiers: DelayTiers,
        prefix: str = DEFAULT_PREFIX,
    ) -> None:
        super().__init__(clock=clock)
        self._settings = settings
        self._tiers = tiers
        self._prefix = prefix
        self._creating = threading.local()
        self.written: list[Written] = []  # every append, in order

    def partitions(self, topic: str) -> list[PartitionLog] | None:
        logs = super().partitions(topic)
        if logs is not None or getattr(self._creating, "queue", False):
            return logs
        queue = self.queue_of(topic)
        if queue is None:
            return None
        self.create_queue(queue)
        return super().partitions(topic)

    def create_queue(self, queue: str) -> QueueTopics:
        """The queue's topics, as ``producer create-queue`` makes them (one partition)."""
        topics = QueueTopics(queue=queue, prefix=self._prefix)
        self._creating.queue = True
        try:
            ensure_queue_topics(
                self._settings, queue, partitions=1, prefix=self._prefix, tiers=self._tiers
            )
        finally:
            self._creating.queue = False
        return topics

    def queue_of(self, topic: str) -> str | None:
        """The queue whose ready topic ``topic`` would be, if any."""
        head = f"{self._prefix}."
        if not topic.startswith(head) or topic.startswith(f"{head}_"):
            return None
        queue = topic[len(head) :]
        try:
            topics = QueueTopics(queue=queue, prefix=self._prefix)
        except ValueError:
            return None
        return queue if topics.ready == topic else None

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: Headers | None, timestamp_ms: int = 0) -> int:  # fmt: skip
        with self.lock:
            offset = super().append(topic, partition, key, value, headers, timestamp_ms)
            self.written.append((topic, partition, offset))
            return offset
