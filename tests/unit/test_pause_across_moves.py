"""A partition paused when it left (lost session or revoke) is fetched again when it
comes back: librdkafka keeps the pause on the partition across assignments, so the
loop resumes every newly assigned partition that it does not want paused.

Without this, a leasekeeper whose session expired while its window was full (for
example while commits could not land) never fetched those partitions again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.unit.engine_ports import with_ports

TOPICS = QueueTopics(queue="q")
TP = TopicPart(TOPICS.ready, 0)


@dataclass
class Engine:
    room: int = 0  # full: the loop pauses what holds its share
    owned: set[TopicPart] = field(default_factory=set)
    window_records: int = 10

    def window_room(self) -> int:
        return self.room

    def over_span(self) -> set[TopicPart]:
        return set()

    def overflow_floods(self, over: set[TopicPart], slice_: int) -> int:
        return 0

    def copying(self, limit: int, unsaved: int) -> set[TopicPart]:
        return set()

    def overflow_watched(self) -> set[int]:
        return set()

    def over_share(
        self, fetching: set[TopicPart], unit: object = None
    ) -> tuple[set[TopicPart], int]:
        return set(fetching), 0

    def assign(self, tp: TopicPart, committed: int, metadata: str | None) -> None:
        self.owned.add(tp)

    def assignment_received(self) -> None:
        pass

    def revoke(self, tp: TopicPart) -> None:
        self.owned.discard(tp)


class Consumer:
    """Keeps each partition's pause across assignments, as librdkafka does."""

    def __init__(self) -> None:
        self.paused: set[TopicPart] = set()

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {TopicPart(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {TopicPart(p.topic, p.partition) for p in partitions}

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, 100) for p in partitions]


class Outbox:
    def blocked(self) -> list[TopicPart]:
        return []


def test_a_partition_paused_when_its_session_expired_is_fetched_when_it_comes_back() -> None:
    engine, consumer = Engine(), Consumer()
    loop = ConsumerLoop(
        consumer=consumer,  # type: ignore[arg-type]
        producer=None,  # type: ignore[arg-type]
        engine=with_ports(engine),  # type: ignore[arg-type]
        codec=EnvelopeCodec(SchemaRegistry()),
        outbox=Outbox(),  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(),
    )
    partition = [TopicPartition(TP.topic, TP.partition)]
    loop.rebalance.on_assign(consumer, partition)  # type: ignore[arg-type]
    loop.fetcher.apply_backpressure()
    assert consumer.paused == {TP}  # the window is full

    loop.rebalance.on_lost(consumer, partition)  # type: ignore[arg-type]
    engine.room = 10  # the window emptied meanwhile
    loop.fetcher.apply_backpressure()
    loop.rebalance.on_assign(consumer, partition)  # type: ignore[arg-type]
    loop.fetcher.apply_backpressure()
    assert consumer.paused == set()
