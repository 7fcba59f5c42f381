"""The consumer loop, assigned a class partition whose backlog reaches far beyond its
span past an ordered job: the loop pauses the partition at its span before it is
read to the end offset seen at assignment, and must not stay paused for good.

The real loop and engine; a fake consumer that serves one partition from a log and
honours pause and resume as librdkafka does; an outbox that delivers every copy on
the turn it is taken (a copy back from the ordering lane lands at the log's end); a
worker that claims and acks everything between loop steps."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.copies import CopyKind
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.leases import Outcome, Settlement, TopicPart
from leasekeeper.ordering import LaneEntry
from leasekeeper.store import LeaseStore
from leasekeeper.tier_gate import TierGate
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

CODEC = EnvelopeCodec(SchemaRegistry())
TOPICS = QueueTopics(queue="q")
TP = TopicPart(TOPICS.ready, 0)
SPAN = 10  # stands for MAX_SPAN (16,000)
KEY = "user-42"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Message:
    def __init__(self, offset: int, value: bytes) -> None:
        self._offset, self._value = offset, value

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TP.topic

    def partition(self) -> int:
        return TP.partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return b"t1"

    def headers(self) -> None:
        return None  # no job headers: the loop decodes the envelope


class Consumer:
    """One partition: fetched from ``position`` on unless paused (a pause drops what
    was read ahead, as librdkafka's does, so nothing beyond is served)."""

    def __init__(self, log: list[bytes]) -> None:
        self.log = log
        self.position = 0
        self.paused: set[TopicPart] = set()

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        if TP in self.paused:
            return []
        taken = self.log[self.position : self.position + num_messages]
        first, self.position = self.position, self.position + len(taken)
        return [Message(first + i, value) for i, value in enumerate(taken)]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {TopicPart(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {TopicPart(p.topic, p.partition) for p in partitions}

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, -1001) for p in partitions]  # none yet

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.log)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        pass

    def assignment(self) -> list[TopicPartition]:
        return []


class Outbox:
    """Delivers every copy at once; a copy back lands at the partition's end."""

    def __init__(self, engine: LeaseEngine, consumer: Consumer) -> None:
        self.engine, self.consumer = engine, consumer

    def pump(self) -> None:
        self.engine.take_statuses()
        for request in self.engine.take_copies():
            if request.kind is CopyKind.RETURN:
                assert request.lane is not None
                self.consumer.log.append(CODEC.encode(request.lane.job))
            self.engine.copy_delivered(request)

    def blocked(self) -> dict[TopicPart, str]:
        return {}


class Producer:
    def poll(self, timeout: float) -> int:
        return 0


class Lane:
    """The ordering lane, empty."""

    def load(self, tps: set[TopicPart], timeout_s: float) -> dict[TopicPart, list[LaneEntry]]:
        return {tp: [] for tp in tps}

    def let_go(self, tps: set[TopicPart]) -> None:
        pass

    def poll(self) -> None:
        pass


def job(i: int, key: str | None) -> bytes:
    return CODEC.encode(Job(job_id=f"j{i}", queue="q", tenant_id="t1", type="noop",
                            payload=b"", created_at_ms=0, ordering_key=key))  # fmt: skip


def test_a_partition_paused_at_its_span_while_settling_moves_on_and_keeps_key_order(
    tmp_path: Path,
) -> None:
    ordered = (0, 5, 50)
    consumer = Consumer([job(i, KEY if i in ordered else None) for i in range(100)])
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(max_span=SPAN))
    clock = Clock()
    loop = ConsumerLoop(
        consumer=consumer,  # type: ignore[arg-type]
        producer=Producer(),  # type: ignore[arg-type]
        engine=engine,
        codec=CODEC,
        outbox=Outbox(engine, consumer),  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(batch_size=5),
        clock=clock,
    )
    loop.lane = Lane()  # type: ignore[assignment]
    loop._on_assign(consumer, [TopicPartition(TP.topic, TP.partition)])  # type: ignore[arg-type]
    started: list[str] = []
    paused_at: list[int] = []
    for _ in range(200):
        loop._step()
        if TP in consumer.paused:
            paused_at.append(consumer.position)
        grants = engine.claim("w", 100, wait_s=0)
        started += [g.job.job_id for g in grants if g.job is not None]
        engine.settle([Settlement(lease_id=g.lease_id, token=g.token, outcome=Outcome.ACK)
                       for g in grants])  # fmt: skip
        clock.now += 0.01
    assert paused_at and min(paused_at) < 100  # paused at its span, short of its end
    assert TP not in consumer.paused  # resumed
    assert [j for j in started if j in ("j0", "j5", "j50")] == ["j0", "j5", "j50"]
    assert sorted(started) == sorted(f"j{i}" for i in range(100))  # every job, once
