"""A fatal consumer error: let go of every partition at once, then rejoin with a new
consumer, and give up (exit non-zero) only when it keeps happening.

A static member whose session expired while the coordinator was away can be fenced
by its own stale commit once it rejoins: no other member exists, and exiting would
leave a queue without its leasekeeper after a single broker restart. Two processes
sharing an instance id fence each other again and again: then one gives up.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import Consumer, KafkaError, KafkaException, KafkaSettings, make_consumer
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.kafka.consumer_loop import (
    REJOIN_WINDOW_S,
    REJOINS,
    ConsumerLoop,
    LoopConfig,
    _Rejoined,
)
from memkafka import Cluster, MemoryMessage, installed
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.unit.engine_ports import with_ports

SETTINGS = KafkaSettings(bootstrap="memory")
TOPICS = QueueTopics(queue="q")
TP = TopicPart(TOPICS.ready, 0)
FATAL = KafkaError(KafkaError._FATAL, "Static consumer fenced", fatal=True)
FENCED = MemoryMessage(TP.topic, TP.partition, None, error=FATAL)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Engine:
    owned: set[TopicPart] = field(default_factory=lambda: {TP})

    def assigned(self) -> list[TopicPart]:
        return sorted(self.owned)

    def revoke(self, tp: TopicPart) -> None:
        self.owned.discard(tp)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as memory:
        yield memory


def _loop(clock: Clock, engine: Engine, made: list[Consumer]) -> ConsumerLoop:
    def factory() -> Consumer:
        made.append(make_consumer(SETTINGS, TOPICS.consumer_group))
        return made[-1]

    loop = ConsumerLoop(
        consumer=make_consumer(SETTINGS, TOPICS.consumer_group),
        producer=None,  # type: ignore[arg-type]
        engine=with_ports(engine),  # type: ignore[arg-type]
        codec=EnvelopeCodec(SchemaRegistry()),
        outbox=None,  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(),
        clock=clock,
        consumer_factory=factory,
    )
    loop._subscribe()
    return loop


def test_a_fenced_consumer_lets_go_at_once_and_rejoins_as_a_new_one(cluster: Cluster) -> None:
    clock, engine, made = Clock(), Engine(), []
    loop = _loop(clock, engine, made)
    old = loop._consumer
    with pytest.raises(_Rejoined):
        loop.fetcher.handle(FENCED)  # type: ignore[arg-type]
    assert engine.owned == set()
    # The old member left the group, closed; the new one joined it.
    assert cluster.group(TOPICS.consumer_group).members == made
    with pytest.raises(RuntimeError, match="Consumer closed"):
        old.consume(num_messages=1, timeout=0)
    assert len(made) == 1 and loop._consumer is made[0]


def test_fenced_again_and_again_it_gives_up_and_the_leasekeeper_exits(cluster: Cluster) -> None:
    clock, engine, made = Clock(), Engine(), []
    loop = _loop(clock, engine, made)
    for _ in range(REJOINS):
        with pytest.raises(_Rejoined):
            loop.fetcher.handle(FENCED)  # type: ignore[arg-type]
        clock.now += 1
    with pytest.raises(KafkaException):
        loop.fetcher.handle(FENCED)  # type: ignore[arg-type]
    assert len(made) == REJOINS


def test_rejoins_long_ago_do_not_count(cluster: Cluster) -> None:
    clock, engine, made = Clock(), Engine(), []
    loop = _loop(clock, engine, made)
    for _ in range(REJOINS + 2):
        with pytest.raises(_Rejoined):
            loop.fetcher.handle(FENCED)  # type: ignore[arg-type]
        clock.now += REJOIN_WINDOW_S / REJOINS + 1
    assert len(made) == REJOINS + 2
