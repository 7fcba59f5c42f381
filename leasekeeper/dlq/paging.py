"""One page of a queue's dead letters, newest first, without reading the whole topic.

A DLQ may hold 30 days of dead letters with payloads of up to 1 MB each, so a page
must not read it all. Each partition is read backwards from a cursor (its end
offsets for the first page) in chunks of one page, by seeking; the partitions'
records are merged newest first by their timestamps. A page reads at most
``MAX_CHUNKS`` chunks of each partition: with a filter that few records match, it
may stop short of ``PAGE_SIZE`` entries, and its "older" cursor goes on from there.

A cursor names, per partition, the offset where the next page starts: ``before``
pages read the offsets below it (older), ``after`` pages those at and above it
(newer, oldest first, shown newest first). Pages meet at cursors, so paging either
way neither skips nor repeats a record, whatever the timestamps say.
"""

from __future__ import annotations

import heapq
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from jobcore.kafka import Consumer, KafkaError, KafkaSettings, TopicPartition, make_consumer
from leasekeeper.dlq.entries import DeadLetterFilter, DlqEntry, decode_entry
from leasekeeper.dlq.reader import DlqError, PartitionRange, plan_ranges
from schemas.codec import EnvelopeCodec

__all__ = [
    "MAX_CHUNKS",
    "PAGE_SIZE",
    "Cursor",
    "CursorError",
    "DlqPage",
    "read_dead_letter",
    "read_page",
]

PAGE_SIZE = 50
MAX_CHUNKS = 4  # per partition and page: a page reads at most MAX_CHUNKS * size records each
_IDLE_TIMEOUT_S = 10.0


class CursorError(ValueError):
    """A page cursor that is not ``PARTITION:OFFSET,...`` as the page links write it."""


@dataclass(frozen=True)
class Cursor:
    """Per partition, the offset where a page starts (see the module's docstring)."""

    offsets: tuple[tuple[int, int], ...]

    def encode(self) -> str:
        return ",".join(f"{p}:{o}" for p, o in self.offsets)

    @classmethod
    def parse(cls, text: str) -> Cursor:
        pairs = []
        for part in text.split(","):
            partition, colon, offset = part.strip().partition(":")
            if not (colon and partition.isdigit() and offset.isdigit()):
                raise CursorError(
                    f"page cursor {text[:80]!r} is not PARTITION:OFFSET,...; "
                    "follow the page's older and newer links"
                )
            pairs.append((int(partition), int(offset)))
        return cls(tuple(sorted(pairs)))

    def get(self, partition: int, default: int) -> int:
        return dict(self.offsets).get(partition, default)


@dataclass(frozen=True, kw_only=True)
class DlqPage:
    """Entries newest first; the cursors of the older and newer pages (None: there is
    none); how many records were read; whether the read budget cut the page short."""

    entries: list[DlqEntry]
    older: Cursor | None
    newer: Cursor | None
    read: int
    cut_short: bool
    depth: int  # records in the topic now (end minus start offsets): an upper bound

    @property
    def complete(self) -> bool:
        """Whether this page holds every matching dead letter of the topic."""
        return self.older is None and self.newer is None and not self.cut_short


class _Letter(NamedTuple):
    offset: int
    timestamp_ms: int
    value: bytes | None


@dataclass(kw_only=True)
class _Lane:
    """One partition, read away from the page's cursor a chunk at a time. ``edge`` is
    where the next chunk starts reading (exclusive end going back, start going on);
    ``bound`` is where the page that follows this one starts."""

    partition: int
    low: int
    high: int
    older: bool
    edge: int
    bound: int
    held: deque[_Letter] = field(default_factory=deque)
    chunks: int = 0

    def exhausted(self) -> bool:
        return not self.held and (self.edge <= self.low if self.older else self.edge >= self.high)

    def next_chunk(self, size: int) -> tuple[int, int]:
        if self.older:
            return max(self.low, self.edge - size), self.edge
        return self.edge, min(self.high, self.edge + size)

    def key(self) -> tuple[int, int]:
        """Heap order: the newest head first going back, the oldest going on."""
        stamp = self.held[0].timestamp_ms
        return (-stamp if self.older else stamp, self.partition)


class _Reader:
    """Reads one partition's offset range at a time and counts every record it is given."""

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.consumer = consumer
        self.topic = topic
        self.read = 0

    def chunk(self, partition: int, start: int, end: int) -> list[_Letter]:
        tp = TopicPartition(self.topic, partition, start)
        self.consumer.assign([tp])
        found: list[_Letter] = []
        deadline = time.monotonic() + _IDLE_TIMEOUT_S
        position = start
        while position < end:
            # No more than the range holds: the consumer then hands over nothing past it.
            for message in self.consumer.consume(num_messages=end - position, timeout=0.2):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF and (
                        error.fatal() or not error.retriable()
                    ):
                        raise DlqError(f"reading {self.topic} failed: {error}")
                    continue
                self.read += 1
                offset = message.offset()
                if offset is not None and start <= offset < end:
                    deadline = time.monotonic() + _IDLE_TIMEOUT_S
                    found.append(_Letter(offset, message.timestamp()[1], message.value()))
            (now,) = self.consumer.position([TopicPartition(self.topic, partition)])
            position = max(position, now.offset)  # steps over control records too
            if position < end and time.monotonic() > deadline:
                raise DlqError(
                    f"no progress reading {self.topic}/{partition} {start}..{end} "
                    f"for {_IDLE_TIMEOUT_S:g}s"
                )
        return found


def _ready(lane: _Lane, reader: _Reader, size: int) -> bool:
    """Read chunks until the lane holds a record or has none left; False when its
    budget ran out first (a stretch of filtered-out or control records)."""
    while not lane.held and not lane.exhausted():
        if lane.chunks >= MAX_CHUNKS:
            return False
        start, end = lane.next_chunk(size)
        records = reader.chunk(lane.partition, start, end)
        lane.held.extend(reversed(records) if lane.older else records)
        lane.edge = start if lane.older else end
        lane.chunks += 1
        if not lane.held:  # nothing between: the next page may start past it
            lane.bound = lane.edge
    return True


def _lanes(ranges: list[PartitionRange], cursor: Cursor | None, *, older: bool) -> list[_Lane]:
    """A lane per partition from the cursor (a partition it does not name, from the
    end going back and from the start going on), within what the topic holds."""
    lanes = []
    for r in ranges:
        default = r.end if older else r.start
        start = min(max(cursor.get(r.partition, default) if cursor else default, r.start), r.end)
        lane = _Lane(partition=r.partition, low=r.start, high=r.end, older=older, edge=start,
                     bound=start)  # fmt: skip
        lanes.append(lane)
    return lanes


def _merge(
    lanes: list[_Lane],
    reader: _Reader,
    decode: Callable[[int, _Letter], DlqEntry],
    selection: DeadLetterFilter,
    size: int,
) -> tuple[list[DlqEntry], bool]:
    """Take records from the lane whose head is newest (oldest going on) until the page
    is full or every lane is exhausted; stop early (True) when a lane out of budget
    would be needed, since its next record might be the next in order."""
    entries: list[DlqEntry] = []
    for lane in lanes:
        if not _ready(lane, reader, size):
            return entries, True
    heap = [(lane.key(), lane.partition) for lane in lanes if lane.held]
    heapq.heapify(heap)
    by_partition = {lane.partition: lane for lane in lanes}
    while heap:
        _, partition = heapq.heappop(heap)
        lane = by_partition[partition]
        record = lane.held.popleft()
        lane.bound = record.offset if lane.older else record.offset + 1
        entry = decode(partition, record)
        if selection.matches(entry):
            entries.append(entry)
            if len(entries) == size:
                break  # the next page reads on from here
        if not _ready(lane, reader, size):
            return entries, True
        if lane.held:
            heapq.heappush(heap, (lane.key(), partition))
    return entries, False


def read_page(
    settings: KafkaSettings,
    topic: str,
    codec: EnvelopeCodec,
    selection: DeadLetterFilter | None = None,
    *,
    before: Cursor | None = None,
    after: Cursor | None = None,
    size: int = PAGE_SIZE,
) -> DlqPage:
    """The ``size`` newest dead letters ``selection`` matches below ``before`` (the
    newest of all without a cursor), or the ``size`` oldest at and above ``after``;
    newest first either way. Commits nothing."""
    if before is not None and after is not None:
        raise CursorError("a page is either before or after a cursor, not both")
    older = after is None
    selection = selection or DeadLetterFilter()
    # Prefetch no more than a page: the consumer would otherwise queue megabytes ahead.
    consumer = make_consumer(
        settings, f"dlq-page.{uuid.uuid4().hex}", **{"queued.min.messages": size}
    )
    try:
        ranges = plan_ranges(consumer, topic, from_committed=False)
        lanes = _lanes(ranges, before if older else after, older=older)
        starts = Cursor(tuple((lane.partition, lane.bound) for lane in lanes))
        reader = _Reader(consumer, topic)

        def decode(partition: int, record: _Letter) -> DlqEntry:
            return decode_entry(codec, partition, record.offset, record.value)

        entries, cut_short = _merge(lanes, reader, decode, selection, size)
    finally:
        consumer.close()
    ends = Cursor(tuple((lane.partition, lane.bound) for lane in lanes))
    below, above = (ends, starts) if older else (starts, ends)
    has_older = any(o > lane.low for (_, o), lane in zip(below.offsets, lanes, strict=True))
    has_newer = any(o < lane.high for (_, o), lane in zip(above.offsets, lanes, strict=True))
    if not older:
        entries.reverse()
    return DlqPage(
        entries=entries,
        older=below if has_older else None,
        newer=above if has_newer else None,
        read=reader.read,
        cut_short=cut_short,
        depth=sum(r.size for r in ranges),
    )


def read_dead_letter(
    settings: KafkaSettings, topic: str, codec: EnvelopeCodec, partition: int, offset: int
) -> DlqEntry | None:
    """The dead letter at ``partition``/``offset``, reading that one record; None if the
    topic has no record there (never written, deleted by retention, a control record)."""
    consumer = make_consumer(settings, f"dlq-show.{uuid.uuid4().hex}", **{"queued.min.messages": 1})
    try:
        ranges = {r.partition: r for r in plan_ranges(consumer, topic, from_committed=False)}
        found = ranges.get(partition)
        if found is None or not found.start <= offset < found.end:
            return None
        records = _Reader(consumer, topic).chunk(partition, offset, offset + 1)
    finally:
        consumer.close()
    return decode_entry(codec, partition, offset, records[0].value) if records else None
