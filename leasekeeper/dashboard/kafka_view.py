"""What Kafka itself says about a queue: offsets, lag, tier backlogs, DLQ depth.

These numbers need no leasekeeper: a queue whose leasekeepers are all down
still shows its backlog growing. Watermarks and the leasekeepers' committed
offsets are asked of the admin client in batches (a cluster may hold hundreds
of queues), and answers are cached for a couple of seconds: many open tabs cost
Kafka one query per refresh interval, not one per tab.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from jobcore.kafka import (
    Consumer,
    KafkaException,
    KafkaSettings,
    TopicPartition,
    make_admin,
    make_consumer,
    watermarks,
)
from jobcore.topics import QueueTopics
from leasekeeper.dashboard.cron_view import CronRow, read_cron

__all__ = [
    "DeadLetterFigures",
    "KafkaView",
    "PartitionLag",
    "QueueOffsets",
    "discover_queues",
    "dlq_depth",
]

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


@dataclass(frozen=True, kw_only=True)
class DeadLetterFigures:
    """A queue's DLQ: how many dead letters it holds, and when the newest arrived."""

    depth: int
    newest_ms: int | None  # timestamp of the newest dead letter; None when empty


def dlq_depth(marks: dict[tuple[str, int], tuple[int, int]], dlq: str) -> int:
    """Dead letters held: the records between the watermarks of every DLQ partition."""
    return sum(high - low for (topic, _), (low, high) in marks.items() if topic == dlq)


def discover_queues(names: set[str], prefix: str) -> list[str]:
    """Queues whose ready and DLQ topics both exist, from a cluster's topic names."""
    start = f"{prefix}."
    return sorted(
        name[len(start) :]
        for name in names
        if name.startswith(start) and f"{name}.dlq" in names and "." not in name[len(start) :]
    )


class KafkaView:
    """Cached, batched queries about the queues of one prefix."""

    def __init__(
        self,
        settings: KafkaSettings,
        prefix: str,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 10.0,
    ) -> None:
        self._settings = settings
        self._timeout_s = timeout_s
        self._prefix = prefix
        self._clock = clock
        self._lock = threading.RLock()
        self._admin = make_admin(settings)
        self._heads: Consumer | None = None
        self._groups: dict[str, Consumer] = {}  # a reader of each queue's commits
        self._cache: dict[object, tuple[float, object]] = {}

    @property
    def bootstrap(self) -> str:
        return self._settings.bootstrap

    def _cached(self, key: object, compute: Callable[[], object]) -> object:
        """A value or a failure, kept ``CACHE_S``: with Kafka down, each page says so at
        once rather than after its own timeout."""
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and self._clock() - hit[0] < CACHE_S:
                if isinstance(hit[1], KafkaException):
                    raise hit[1]
                return hit[1]
            try:
                value = compute()
            except KafkaException as exc:
                self._cache[key] = (self._clock(), exc)
                raise
            self._cache[key] = (self._clock(), value)
            return value

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count."""

        def compute() -> dict[str, int]:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
            return {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}

        found = self._cached("topics", compute)
        assert isinstance(found, dict)
        return found

    def queues(self) -> list[str]:
        return discover_queues(set(self.topics()), self._prefix)

    def cron(self) -> list[CronRow]:
        """Every scheduler group's cron entries with their next and last fires."""
        found = self._cached(
            "cron", lambda: read_cron(self._settings, self._prefix, set(self.topics()))
        )
        assert isinstance(found, list)
        return found

    def offsets(self, queue: str) -> QueueOffsets:
        return self.many([queue])[queue]

    def many(self, queues: list[str]) -> dict[str, QueueOffsets]:
        """Offsets of ``queues``, asked of Kafka in a few batched requests."""
        found = self._cached(tuple(queues), lambda: self._compute(queues))
        assert isinstance(found, dict)
        return found

    def _compute(self, queues: list[str]) -> dict[str, QueueOffsets]:
        counts = self.topics()
        named = {q: QueueTopics(queue=q, prefix=self._prefix) for q in queues}
        own = {q: _own_topics(t, counts) for q, t in named.items()}
        marks = watermarks(
            self._admin,
            [
                (topic, p)
                for topics in own.values()
                for topic in topics
                for p in range(counts[topic])
            ],
        )
        commits = {
            t.consumer_group: self._committed(t.consumer_group, own[q], counts)
            for q, t in named.items()
        }
        result = {}
        for queue, topics in named.items():
            committed = commits.get(topics.consumer_group, {})
            lags = {
                topic: _lags(topic, counts[topic], marks, committed)
                for topic in own[queue]
                if topic != topics.dlq
            }
            result[queue] = QueueOffsets(
                queue=queue,
                ready=tuple(lags.get(topics.ready, [])),
                tiers={t: sum(p.lag for p in ps) for t, ps in lags.items() if t != topics.ready},
                dlq_depth=dlq_depth(marks, topics.dlq),
                oldest_ready_ms=None,
            )
        heads = self._oldest([p for o in result.values() for p in o.ready if p.lag])
        return {
            q: replace(o, oldest_ready_ms=_min(heads.get((p.topic, p.partition)) for p in o.ready))
            for q, o in result.items()
        }

    def dead_letters(self, queue: str) -> DeadLetterFigures:
        """The DLQ's depth and the time of its newest record: what a leasekeeper exports
        for the "DLQ growing" alert, without the rest of ``offsets``."""
        found = self._cached(("dead letters", queue), lambda: self._dead_letters(queue))
        assert isinstance(found, DeadLetterFigures)
        return found

    def _dead_letters(self, queue: str) -> DeadLetterFigures:
        dlq = QueueTopics(queue=queue, prefix=self._prefix).dlq
        marks = watermarks(self._admin, [(dlq, p) for p in range(self.topics().get(dlq, 0))])
        last = [
            TopicPartition(t, p, high - 1) for (t, p), (low, high) in marks.items() if high > low
        ]
        return DeadLetterFigures(
            depth=dlq_depth(marks, dlq), newest_ms=max(self._first_at(last).values(), default=None)
        )

    def _committed(
        self, group: str, topics: list[str], counts: dict[str, int]
    ) -> dict[tuple[str, int], int]:
        """The group's committed offsets of ``topics``, asked by a consumer of the group
        that never joins it (no subscription, no auto-commit). Not the admin client's
        ListConsumerGroupOffsets: librdkafka 2.16 dereferences the admin client's missing
        consumer group when that answer says the group's coordinator is still loading (a
        broker just started), and the dashboard died by SIGSEGV."""
        consumer = self._groups.get(group)
        if consumer is None:
            consumer = self._groups[group] = make_consumer(self._settings, group)
        tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        try:
            found = consumer.committed(tps, timeout=self._timeout_s) if tps else []
        except KafkaException:
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def _oldest(self, lagging: list[PartitionLag]) -> dict[tuple[str, int], int]:
        """Produce time of the first unconsumed record of each lagging partition."""
        return self._first_at(
            [TopicPartition(p.topic, p.partition, max(p.committed, 0)) for p in lagging]
        )

    def _first_at(self, positions: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """Timestamp of the record at each position (a second at most for all)."""
        if not positions:
            return {}
        if self._heads is None:
            self._heads = make_consumer(self._settings, f"dashboard-heads.{uuid.uuid4().hex}")
        consumer = self._heads
        consumer.assign(positions)
        seen: dict[tuple[str, int], int] = {}
        deadline = self._clock() + 1.0
        try:
            while len(seen) < len(positions) and self._clock() < deadline:
                for message in consumer.consume(num_messages=len(positions), timeout=0.2):
                    topic, partition = message.topic(), message.partition()
                    if message.error() is None and topic is not None and partition is not None:
                        seen.setdefault((topic, partition), message.timestamp()[1])
        finally:
            consumer.unassign()
        return seen


def _own_topics(topics: QueueTopics, counts: dict[str, int]) -> list[str]:
    """The ready topic, its delay tiers (every class's) and its DLQ, as they exist in
    the cluster."""
    return [name for name in counts if name in (topics.ready, topics.dlq) or topics.is_tier(name)]


def _lags(
    topic: str,
    partitions: int,
    marks: dict[tuple[str, int], tuple[int, int]],
    committed: dict[tuple[str, int], int],
) -> list[PartitionLag]:
    return [
        PartitionLag(
            topic=topic,
            partition=p,
            end=marks.get((topic, p), (0, 0))[1],
            committed=committed.get((topic, p), -1),
        )
        for p in range(partitions)
    ]


def _min(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None
