"""The ordering lane's feed keeps each record's place, not its job (N10): a lane that
grows while keys stay blocked is not held whole in every leasekeeper's memory, and
a partition assigned later still gets its entries, read again by their offsets."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from jobcore.kafka import KafkaSettings, TopicPartition
from leasekeeper.core.leases import TopicPart
from leasekeeper.ordering.keys import KeyBook
from leasekeeper.ordering.lane import LaneFeed, encode_entry
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

CODEC = EnvelopeCodec(SchemaRegistry())
LANE = "jobs.q.ordering"
READY = "jobs.q.ready"


class Message:
    def __init__(self, offset: int, key: bytes, value: bytes | None) -> None:
        self._offset, self._key, self._value = offset, key, value

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> None:
        return None


class Log:
    """The lane's one partition, read from an assigned offset on."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.at = 0
        self.assigned: list[int] = []

    def assign(self, tps: list[TopicPartition]) -> None:
        self.at = max(0, tps[0].offset)
        self.assigned.append(self.at)

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.messages)

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(LANE, 0, self.at)]

    def consume(self, n: int, timeout: float) -> list[Message]:
        taken = self.messages[self.at : self.at + n]
        self.at += len(taken)
        return taken

    def close(self) -> None:
        pass


def feed_on(messages: list[Message], monkeypatch: pytest.MonkeyPatch) -> tuple[LaneFeed, Log]:
    feed = LaneFeed(settings=KafkaSettings(bootstrap="127.0.0.1:9", client_id="t"), topic=LANE,
                    codec=CODEC, on_operator=lambda tp, seq, entry: None)  # fmt: skip
    feed._consumer.close()
    feed._consumer = Log(messages)  # type: ignore[assignment]
    reader = Log(messages)
    feed._reader = reader  # type: ignore[assignment]
    monkeypatch.setattr(feed, "_exists", lambda: True)
    return feed, reader


def entry(
    partition: int, seq: int, state: LaneState = LaneState.HELD, payload: int = 0
) -> LaneEntry:
    line = LineId(topic=READY, partition=partition, tenant="t1", key=f"k{partition}")
    job = Job(job_id=f"p{partition}-{seq}", queue="q", tenant_id="t1", type="noop",
              payload=b"x" * payload, created_at_ms=0, ordering_key=line.key,
              ordering_seq=seq)  # fmt: skip
    return LaneEntry(line=line, seq=seq, job=job, state=state, reason="behind a blocked head")


def key(partition: int, seq: int) -> bytes:
    return f"{READY}|{partition}|{seq}".encode()


def test_records_of_partitions_not_owned_keep_their_place_and_not_their_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed, _ = feed_on([], monkeypatch)
    value = encode_entry(entry(3, 0, payload=400), CODEC)  # about 600 bytes a record
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100_000):
            feed._apply(Message(i, key(i % 8, 1_000_000 + i), value))  # type: ignore[arg-type]
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # About 100 bytes a record (a seq and an offset), not the ~60 MB of their jobs.
    assert grown < 16 * 1024 * 1024, f"{grown} bytes for 100,000 records not owned"
    assert sum(len(places) for places in feed.offsets.values()) == 100_000
    assert feed.offsets[TopicPart(READY, 5)][1_000_005] == 5  # its lane offset


def test_a_partition_assigned_later_gets_its_entries_and_its_held_jobs_return_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    messages: list[Message] = []

    def put(e: LaneEntry) -> None:
        messages.append(
            Message(len(messages), key(e.line.partition, e.seq), encode_entry(e, CODEC))
        )

    for seq in range(50):  # another partition's lane, before and after
        put(entry(0, seq))
    put(entry(1, 10, LaneState.HELD))  # the head, parked at first...
    first_of_1 = len(messages) - 1
    put(entry(1, 12))
    put(entry(1, 11))
    put(entry(1, 13))
    messages.append(Message(len(messages), key(1, 13), None))  # 13 came back: deleted
    for seq in range(50, 100):
        put(entry(0, seq))
    put(entry(1, 10, LaneState.RETRYING))  # ...then retrying, due now
    put(entry(1, 14))
    feed, reader = feed_on(messages, monkeypatch)
    feed.catch_up()  # at start: places only
    assert set(feed.offsets) == {TopicPart(READY, 0), TopicPart(READY, 1)}

    tp = TopicPart(READY, 1)
    loaded = feed.load({tp}, timeout_s=5.0)

    assert [(e.seq, e.state) for e in loaded[tp]] == [
        (10, LaneState.RETRYING), (11, LaneState.HELD), (12, LaneState.HELD), (14, LaneState.HELD),
    ]  # fmt: skip
    assert reader.assigned == [first_of_1 + 1]  # from its lowest live record on, not the start
    book = KeyBook()
    book.assign(tp, 0, loaded[tp])
    back = book.returns(0, lambda tp: 0)
    assert [e.job_id for e in back] == ["p1-10", "p1-11", "p1-12", "p1-14"]


def test_a_load_cut_short_goes_on_where_it_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = [Message(i, key(1, i), encode_entry(entry(1, i), CODEC)) for i in range(40)]
    feed, reader = feed_on(messages, monkeypatch)
    feed.catch_up()
    served: list[int] = []
    consume = reader.consume

    def slowly(n: int, timeout: float) -> list[Any]:
        taken = consume(min(n, 10), timeout)
        served.extend(m.offset() for m in taken)
        return taken

    monkeypatch.setattr(reader, "consume", slowly)
    tp = TopicPart(READY, 1)
    with pytest.raises(TimeoutError):
        feed.load({tp}, timeout_s=0.0)
    loaded = feed.load({tp}, timeout_s=5.0)
    assert [e.seq for e in loaded[tp]] == list(range(40))
    assert served == list(range(40))  # each record read once
