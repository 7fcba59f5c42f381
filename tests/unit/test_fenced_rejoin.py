"""A fatal consumer error: let go of every partition at once, then rejoin with a new
consumer, and give up (exit non-zero) only when it keeps happening.

A static member whose session expired while the coordinator was away can be fenced
by its own stale commit once it rejoins: no other member exists, and exiting would
leave a queue without its leasekeeper after a single broker restart. Two processes
sharing an instance id fence each other again and again: then one gives up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, KafkaException

from jobcore.delay_tiers import DelayTiers
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
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.unit.engine_ports import with_ports

TOPICS = QueueTopics(queue="q")
TP = TopicPart(TOPICS.ready, 0)


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


class Consumer:
    def __init__(self) -> None:
        self.subscribed = False
        self.closed = False

    def subscribe(self, topics: list[str], **callbacks: object) -> None:
        self.subscribed = True

    def close(self) -> None:
        self.closed = True


class FencedMessage:
    def error(self) -> KafkaError:
        return KafkaError(KafkaError._FATAL, "Static consumer fenced", fatal=True)


def _loop(clock: Clock, engine: Engine, made: list[Consumer]) -> ConsumerLoop:
    def factory() -> Consumer:
        made.append(Consumer())
        return made[-1]

    return ConsumerLoop(
        consumer=Consumer(),  # type: ignore[arg-type]
        producer=None,  # type: ignore[arg-type]
        engine=with_ports(engine),  # type: ignore[arg-type]
        codec=EnvelopeCodec(SchemaRegistry()),
        outbox=None,  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(),
        clock=clock,
        consumer_factory=factory,  # type: ignore[arg-type]
    )


def test_a_fenced_consumer_lets_go_at_once_and_rejoins_as_a_new_one() -> None:
    clock, engine, made = Clock(), Engine(), []
    loop = _loop(clock, engine, made)
    old = loop._consumer
    with pytest.raises(_Rejoined):
        loop.fetcher.handle(FencedMessage())  # type: ignore[arg-type]
    assert engine.owned == set()
    assert old.closed  # type: ignore[attr-defined]
    assert len(made) == 1 and made[0].subscribed and loop._consumer is made[0]  # type: ignore[comparison-overlap]


def test_fenced_again_and_again_it_gives_up_and_the_leasekeeper_exits() -> None:
    clock, engine, made = Clock(), Engine(), []
    loop = _loop(clock, engine, made)
    for _ in range(REJOINS):
        with pytest.raises(_Rejoined):
            loop.fetcher.handle(FencedMessage())  # type: ignore[arg-type]
        clock.now += 1
    with pytest.raises(KafkaException):
        loop.fetcher.handle(FencedMessage())  # type: ignore[arg-type]
    assert len(made) == REJOINS


def test_rejoins_long_ago_do_not_count() -> None:
    clock, engine, made = Clock(), Engine(), []
    loop = _loop(clock, engine, made)
    for _ in range(REJOINS + 2):
        with pytest.raises(_Rejoined):
            loop.fetcher.handle(FencedMessage())  # type: ignore[arg-type]
        clock.now += REJOIN_WINDOW_S / REJOINS + 1
    assert len(made) == REJOINS + 2
