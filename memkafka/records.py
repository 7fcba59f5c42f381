"""The records of the in-memory cluster, and how a key picks its partition."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from jobcore.kafka import KafkaError, TopicPartition

__all__ = ["MemoryMessage", "RefusedPartition", "StoredRecord", "partition_of", "topic_partition"]

# ``Message.timestamp()``'s type for a timestamp the producer set (TIMESTAMP_CREATE_TIME).
CREATE_TIME = 1

Headers = list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record of a partition's log, as the broker keeps it."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    timestamp_ms: int


class MemoryMessage:
    """What ``confluent_kafka.Message`` offers (a C type no test can construct): the
    same methods, so the code under test cannot tell them apart."""

    __slots__ = ("_error", "_headers", "_key", "_offset", "_partition", "_timestamp", "_topic",
                 "_value")  # fmt: skip

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int | None,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Headers | None = None,
        timestamp_ms: int = 0,
        error: KafkaError | None = None,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp = timestamp_ms
        self._error = error

    @classmethod
    def of(cls, topic: str, partition: int, record: StoredRecord) -> MemoryMessage:
        return cls(topic, partition, record.offset, key=record.key, value=record.value,
                   headers=record.headers, timestamp_ms=record.timestamp_ms)  # fmt: skip

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> Headers | None:
        return None if not self._headers else list(self._headers)

    def set_headers(self, headers: Headers | None) -> None:
        self._headers = headers

    def timestamp(self) -> tuple[int, int]:
        return (CREATE_TIME, self._timestamp)

    def error(self) -> KafkaError | None:
        return self._error

    def len(self) -> int:
        return len(self._value or b"")

    def __len__(self) -> int:
        return self.len()

    def __repr__(self) -> str:
        return f"MemoryMessage({self._topic}[{self._partition}]@{self._offset}, key={self._key!r})"


def partition_of(key: bytes | None, partitions: int, rng: random.Random) -> int:
    """librdkafka's default partitioner (``consistent_random``), which the project's
    producers keep: CRC-32 of the key modulo the partition count; a null or empty
    key goes to a random partition."""
    if not key:
        return rng.randrange(partitions)
    return zlib.crc32(key) % partitions


def topic_partition(
    topic: str, partition: int, offset: int, metadata: str | None
) -> TopicPartition:
    """A TopicPartition with ``metadata`` when there is some (it refuses None)."""
    if metadata is None:
        return TopicPartition(topic, partition, offset)
    return TopicPartition(topic, partition, offset, metadata)


class RefusedPartition(TopicPartition):
    """A partition of a commit the broker refused, with its error (a TopicPartition's
    own ``error`` cannot be set from Python)."""

    refusal: KafkaError | None = None

    @property
    def error(self) -> KafkaError | None:  # type: ignore[override]
        return self.refusal
