"""The consumer loop, assigned a class partition whose backlog reaches far beyond its
span past an ordered job: the loop pauses the partition at its span before it is
read to the end offset seen at assignment, and must not stay paused for good.

The real loop, engine and outbox over the in-memory Kafka (``memkafka``): its
consumer honours pause and resume as librdkafka does, and a copy back from the
ordering lane lands at the partition's end. A worker claims and acks everything
between loop steps; the ordering lane's reader is a stand-in that holds nothing."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import TopicPartition

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaSettings, make_consumer, make_producer
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.ordering.values import LaneEntry
from memkafka import Cluster, installed
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

CODEC = EnvelopeCodec(SchemaRegistry())
SETTINGS = KafkaSettings(bootstrap="memory")
TOPICS = QueueTopics(queue="q")
TP = TopicPart(TOPICS.ready, 0)
SPAN = 10  # stands for MAX_SPAN (16,000)
KEY = "user-42"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


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
    with installed(Cluster()) as cluster:
        ensure_queue_topics(SETTINGS, "q", partitions=1)
        for i in range(100):
            cluster.append(TP.topic, 0, b"t1", job(i, KEY if i in ordered else None), None)
        engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(max_span=SPAN),
                             decode=CODEC.decode)  # fmt: skip
        producer = make_producer(SETTINGS)
        consumer = make_consumer(SETTINGS, TOPICS.consumer_group)
        clock = Clock()
        loop = ConsumerLoop(
            consumer=consumer,
            producer=producer,
            engine=engine,
            codec=CODEC,
            outbox=CopySender(producer=producer, copies=engine.copies,
                          router=KafkaRouter(codec=CODEC, topics=TOPICS, tiers=DelayTiers())),
            topics=TOPICS,
            gate=TierGate(DelayTiers(), TOPICS),
            config=LoopConfig(batch_size=5, poll_timeout_s=0.0),
            clock=clock,
            lane=Lane(),  # type: ignore[arg-type]
        )  # fmt: skip
        loop._subscribe()
        tp = TopicPartition(TP.topic, TP.partition)
        started: list[str] = []
        paused_at: list[int] = []
        for _ in range(200):
            loop._step()
            if consumer.paused():  # type: ignore[attr-defined]
                paused_at.append(consumer.position([tp])[0].offset)
            grants = engine.workers.claim("w", 100, wait_s=0)
            started += [g.job.job_id for g in grants if g.job is not None]
            engine.workers.settle([Settlement(lease_id=g.lease_id, token=g.token,
                                              outcome=SettleKind.ACK)
                           for g in grants])  # fmt: skip
            clock.now += 0.01
        assert paused_at and min(paused_at) < 100  # paused at its span, short of its end
        assert consumer.paused() == []  # type: ignore[attr-defined]  # resumed
        assert [j for j in started if j in ("j0", "j5", "j50")] == ["j0", "j5", "j50"]
        assert sorted(started) == sorted(f"j{i}" for i in range(100))  # every job, once
