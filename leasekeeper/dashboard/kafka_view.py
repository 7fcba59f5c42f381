"""What Kafka itself says about a queue: offsets, lag, tier backlogs, DLQ depth.

These numbers need no leasekeeper: a queue whose leasekeepers are all down
still shows its backlog growing. Committed offsets are read with a consumer of
the leasekeepers' group that never subscribes (so it never joins the group),
and answers are cached for a couple of seconds: many open tabs cost Kafka one
query per refresh interval, not one per tab.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jobcore.kafka import (
    Consumer,
    KafkaSettings,
    TopicPartition,
    make_admin,
    make_consumer,
)
from jobcore.topics import QueueTopics

__all__ = ["KafkaView", "PartitionLag", "QueueOffsets", "discover_queues"]

CACHE_S = 2.0


@dataclass(frozen=True, kw_only=True)
class PartitionLag:
    topic: str
    partition: int
    end: int
    committed: int  # -1 when the group committed nothing yet

    @property
    def lag(self) -> int:
        return max(0, self.end - max(self.committed, 0))


@dataclass(frozen=True, kw_only=True)
class QueueOffsets:
    queue: str
    ready: tuple[PartitionLag, ...]
    tiers: dict[str, int]  # tier topic -> records not yet consumed
    dlq_depth: int
    oldest_ready_ms: int | None  # produce time of the oldest unconsumed ready record

    @property
    def backlog(self) -> int:
        return sum(p.lag for p in self.ready)


def discover_queues(names: set[str], prefix: str) -> list[str]:
    """Queues whose ready and DLQ topics both exist, from a cluster's topic names."""
    start = f"{prefix}."
    return sorted(
        name[len(start) :]
        for name in names
        if name.startswith(start) and f"{name}.dlq" in names and "." not in name[len(start) :]
    )


class KafkaView:
    """Cached queries about queues of one prefix."""

    def __init__(
        self, settings: KafkaSettings, prefix: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._prefix = prefix
        self._clock = clock
        self._lock = threading.Lock()
        self._consumers: dict[str, Consumer] = {}
        self._cache: dict[str, tuple[float, object]] = {}

    def _cached(self, key: str, compute: Callable[[], object]) -> object:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and self._clock() - hit[0] < CACHE_S:
                return hit[1]
            value = compute()
            self._cache[key] = (self._clock(), value)
            return value

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count."""

        def compute() -> dict[str, int]:
            metadata = make_admin(self._settings).list_topics(timeout=10)
            return {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}

        found = self._cached("topics", compute)
        assert isinstance(found, dict)
        return found

    def queues(self) -> list[str]:
        return discover_queues(set(self.topics()), self._prefix)

    def offsets(self, queue: str) -> QueueOffsets:
        found = self._cached(f"q:{queue}", lambda: self._offsets(queue))
        assert isinstance(found, QueueOffsets)
        return found

    def _consumer(self, group: str) -> Consumer:
        if group not in self._consumers:
            self._consumers[group] = make_consumer(self._settings, group)
        return self._consumers[group]

    def _offsets(self, queue: str) -> QueueOffsets:
        topics = QueueTopics(queue=queue, prefix=self._prefix)
        counts = self.topics_uncached()
        consumer = self._consumer(topics.consumer_group)
        ready = self._lags(consumer, topics.ready, counts.get(topics.ready, 0))
        tier_prefix = f"{topics.ready}.retry."
        tiers = {
            name: sum(p.lag for p in self._lags(consumer, name, n))
            for name, n in sorted(counts.items())
            if name.startswith(tier_prefix)
        }
        return QueueOffsets(
            queue=queue,
            ready=tuple(ready),
            tiers=tiers,
            dlq_depth=self._depth(consumer, topics.dlq, counts.get(topics.dlq, 0)),
            oldest_ready_ms=self._oldest(consumer, ready),
        )

    def topics_uncached(self) -> dict[str, int]:
        metadata = make_admin(self._settings).list_topics(timeout=10)
        return {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}

    @staticmethod
    def _lags(consumer: Consumer, topic: str, partitions: int) -> list[PartitionLag]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=10)}
        lags = []
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            done = committed.get(p, -1)
            lags.append(PartitionLag(topic=topic, partition=p, end=high, committed=max(done, -1)))
        return lags

    @staticmethod
    def _depth(consumer: Consumer, topic: str, partitions: int) -> int:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += max(0, high - low)
        return total

    @staticmethod
    def _oldest(consumer: Consumer, ready: list[PartitionLag]) -> int | None:
        """Timestamp of the first unconsumed record of each lagging partition; the oldest."""
        heads = [TopicPartition(p.topic, p.partition, max(p.committed, 0)) for p in ready if p.lag]
        if not heads:
            return None
        consumer.assign(heads)
        try:
            seen: dict[int, int] = {}
            deadline = time.monotonic() + 1.0
            while len(seen) < len(heads) and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=len(heads), timeout=0.2):
                    partition = message.partition()
                    if message.error() is None and partition is not None:
                        seen.setdefault(partition, message.timestamp()[1])
        finally:
            consumer.unassign()
        return min(seen.values()) if seen else None
