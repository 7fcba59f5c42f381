"""A restarted leasekeeper settles in only once every family consumer (one per class,
one for the tiers, one for the overflow lane) applied its first assignment: the
families get theirs one after another, and a held ack of a class whose partitions
come later must be answered "retry later", not "unknown lease" (its job would run
again)."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.unit.engine_ports import with_ports
from tests.unit.test_pause_across_moves import Consumer, Engine, Outbox

TOPICS = QueueTopics(queue="q")


class CountingEngine(Engine):
    received = 0

    def assignment_received(self) -> None:
        self.received += 1


class Families:
    """The part of ``FamilyConsumer`` the loop looks at: its consumers by family."""

    def __init__(self, **consumers: Consumer) -> None:
        self.families = consumers


def loop_over(consumer: object, engine: Engine) -> ConsumerLoop:
    return ConsumerLoop(
        consumer=consumer,  # type: ignore[arg-type]
        producer=None,  # type: ignore[arg-type]
        engine=with_ports(engine),  # type: ignore[arg-type]
        codec=EnvelopeCodec(SchemaRegistry()),
        outbox=Outbox(),  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(),
    )


def test_settling_in_waits_for_the_last_family_to_be_assigned() -> None:
    critical, default = Consumer(), Consumer()
    engine = CountingEngine()
    loop = loop_over(Families(critical=critical, default=default), engine)
    loop.rebalance.on_assign(critical, [TopicPartition(TOPICS.of_class("critical"), 0)])  # type: ignore[arg-type]
    assert engine.received == 0, "the default class's partitions are not assigned yet"
    loop.rebalance.on_assign(default, [TopicPartition(TOPICS.ready, 0)])  # type: ignore[arg-type]
    assert engine.received == 1


def test_one_plain_consumer_settles_in_at_its_first_assignment() -> None:
    consumer, engine = Consumer(), CountingEngine()
    loop = loop_over(consumer, engine)
    loop.rebalance.on_assign(consumer, [TopicPartition(TOPICS.ready, 0)])  # type: ignore[arg-type]
    assert engine.received == 1
