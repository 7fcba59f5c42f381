"""Read a queue's dead letters: every partition from a start offset to the end it had.

The end offsets are captured when reading starts, so a DLQ that keeps growing
(an outage still in progress) cannot make a listing or a replay run forever;
what arrives later is for the next run. Listing assigns partitions directly and
commits nothing; a replay starts from its consumer group's committed offsets
(see ``leasekeeper/dlq/replay.py``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from jobcore.kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaSettings,
    Message,
    TopicPartition,
    make_consumer,
)
from leasekeeper.dlq.entries import DeadLetterFilter, DlqEntry, decode_entry
from schemas.codec import EnvelopeCodec

__all__ = [
    "DeadLetterFilter",
    "DlqError",
    "DlqRecord",
    "PartitionRange",
    "plan_ranges",
    "read_dead_letters",
    "scan",
]

_METADATA_TIMEOUT_S = 10.0


class DlqError(RuntimeError):
    """The DLQ cannot be read: no such topic, a broker error, or no progress."""


class MissingDlq(DlqError):
    """The queue has no DLQ topic: a mistyped or missing queue, a setup mistake (exit 2)."""


@dataclass(frozen=True, kw_only=True)
class PartitionRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition."""

    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True, kw_only=True)
class DlqRecord:
    """A raw record of the DLQ topic, before decoding."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def plan_ranges(consumer: Consumer, topic: str, *, from_committed: bool) -> list[PartitionRange]:
    """Each partition's range to read now: from the start (or the group's commit) to its end."""
    partitions = _partitions(consumer, topic)
    committed: dict[int, int] = {}
    if from_committed:
        tps = [TopicPartition(topic, p) for p in partitions]
        found = consumer.committed(tps, timeout=_METADATA_TIMEOUT_S)
        committed = {tp.partition: tp.offset for tp in found if tp.offset != OFFSET_INVALID}
    ranges = []
    for partition in partitions:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=_METADATA_TIMEOUT_S
        )
        # A commit below the low watermark points at records retention deleted.
        start = max(low, committed.get(partition, low))
        ranges.append(PartitionRange(partition=partition, start=start, end=high))
    return ranges


def _partitions(consumer: Consumer, topic: str) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=_METADATA_TIMEOUT_S)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        error = found.error if found is not None else None
        if error is None or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise MissingDlq(
                f"cannot read {topic}: no such topic; is the queue name right? "
                "(`producer create-queue` creates a queue's topics)"
            )
        raise DlqError(f"cannot read {topic}: {error.str()}")
    return sorted(found.partitions)


def scan(
    consumer: Consumer,
    topic: str,
    ranges: Iterable[PartitionRange],
    *,
    idle_timeout_s: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[DlqRecord]:
    """Yield every record of ``ranges`` in offset order per partition, then stop."""
    active = {r.partition: r for r in ranges if r.size > 0}
    if not active:
        return
    consumer.assign([TopicPartition(topic, r.partition, r.start) for r in active.values()])
    last_progress = clock()
    while active:
        for message in consumer.consume(num_messages=500, timeout=0.2):
            record = _record(message, active)
            if record is not None:
                last_progress = clock()
                yield record
        for partition in _finished(consumer, topic, active):
            del active[partition]
        if active and clock() - last_progress > idle_timeout_s:
            left = {p: (r.start, r.end) for p, r in active.items()}
            raise DlqError(f"no progress reading {topic} for {idle_timeout_s:g}s: {left}")


def _record(message: Message, active: dict[int, PartitionRange]) -> DlqRecord | None:
    error = message.error()
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF:
            return None
        if error.fatal() or not error.retriable():
            raise DlqError(f"reading the DLQ failed: {error}")
        return None
    partition, offset = message.partition(), message.offset()
    if partition is None or offset is None:
        return None
    wanted = active.get(partition)
    if wanted is None or offset >= wanted.end:
        return None  # arrived after the read started: for the next run
    return DlqRecord(
        partition=partition,
        offset=offset,
        key=message.key(),
        value=message.value(),
    )


def _finished(consumer: Consumer, topic: str, active: dict[int, PartitionRange]) -> list[int]:
    """Partitions whose position reached their end (it also steps over control records)."""
    positions = consumer.position([TopicPartition(topic, p) for p in active])
    return [tp.partition for tp in positions if tp.offset >= active[tp.partition].end]


def read_dead_letters(
    settings: KafkaSettings,
    topic: str,
    codec: EnvelopeCodec,
    selection: DeadLetterFilter | None = None,
) -> Iterator[DlqEntry]:
    """Every dead letter of ``topic`` as it is now that ``selection`` matches; commits nothing."""
    selection = selection or DeadLetterFilter()
    # A fresh group id that never commits: reading leaves no trace on the cluster.
    consumer = make_consumer(settings, f"dlq-list.{uuid.uuid4().hex}")
    try:
        ranges = plan_ranges(consumer, topic, from_committed=False)
        for record in scan(consumer, topic, ranges):
            entry = decode_entry(codec, record.partition, record.offset, record.value)
            if selection.matches(entry):
                yield entry
    finally:
        consumer.close()
