"""What a relay asks Kafka: where partitions end, and which job ids landed past marks."""

from __future__ import annotations

import time
import uuid

from jobcore.kafka import KafkaSettings, TopicPartition, end_offsets, make_consumer
from producer.api import EnqueueError
from producer.outbox.marks import Marks

__all__ = ["KafkaPositions"]


class KafkaPositions:
    """A consumer that never joins a group and never commits; close it when done."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._consumer = make_consumer(settings, f"outbox-relay-{uuid.uuid4().hex}")

    def ends(self, topic: str) -> dict[int, int]:
        """The next offset of every partition of ``topic``."""
        metadata = self._consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            # Without every partition's end, a crash could not be recovered: do not send.
            problem = "unknown" if metadata is None else metadata.error
            raise EnqueueError(f"cannot read the partitions of {topic} ({problem})")
        return end_offsets(self._consumer, topic, metadata.partitions)

    def landed(self, marks: Marks, timeout_s: float = 60.0) -> set[str]:
        """The ``job_id`` headers of every record from ``marks`` to the current ends."""
        todo = self._ranges(marks)
        if not todo:
            return set()
        self._consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in todo.items()])
        found: set[str] = set()
        deadline = time.monotonic() + timeout_s
        try:
            while todo:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"outbox recovery: {len(todo)} partitions not read")
                for msg in self._consumer.consume(500, timeout=0.5):
                    if msg.error() is None:
                        found.update(_job_id(msg.headers()))
                        _done(todo, msg.topic(), msg.partition(), msg.offset())
        finally:
            self._consumer.unassign()
        return found

    def close(self) -> None:
        self._consumer.close()

    def _ranges(self, marks: Marks) -> dict[tuple[str, int], tuple[int, int]]:
        ranges = {}
        for topic, parts in marks.positions.items():
            ends = end_offsets(self._consumer, topic, parts)
            for partition, start in parts.items():
                if ends[partition] > start:
                    ranges[(topic, partition)] = (start, ends[partition])
        return ranges


def _job_id(headers: object) -> list[str]:
    """The ``job_id`` header the producer sets on every job record."""
    if not isinstance(headers, list):
        return []
    return [
        value.decode() if isinstance(value, bytes) else str(value)
        for key, value in headers
        if key == "job_id" and value
    ]


def _done(
    todo: dict[tuple[str, int], tuple[int, int]],
    topic: str | None,
    partition: int | None,
    offset: int | None,
) -> None:
    key = (str(topic), int(partition or 0))
    if key in todo and offset is not None and offset + 1 >= todo[key][1]:
        del todo[key]
