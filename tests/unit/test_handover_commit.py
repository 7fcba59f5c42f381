"""A revoke hands its partitions over with a commit the next owner can trust.

The coordinator moves to another broker within seconds of a broker failure; a
revoke that met it moving and gave up would hand over a stale commit, and the
next owner would run again every job finished since. The fakes keep time on a
driven clock: each wait of the loop (the producer's poll) advances it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.kafka.consumer_loop import HANDOVER_COMMIT_PATIENCE_S, ConsumerLoop, LoopConfig
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.unit.engine_ports import with_ports

TOPICS = QueueTopics(queue="q")
TP = TopicPart(TOPICS.ready, 0)
POSITION = (42, "")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Engine:
    """Forty-two jobs finished on one partition, none in flight."""

    accepted: list[dict[TopicPart, tuple[int, str]]] = field(default_factory=list)
    revoked: list[TopicPart] = field(default_factory=list)

    def commit_soon(self) -> bool:
        return False

    def commit_positions(self, only: set[TopicPart] | None = None) -> dict:
        return {} if self.accepted else {TP: POSITION}

    def committed(self, positions: dict[TopicPart, tuple[int, str]]) -> None:
        self.accepted.append(dict(positions))

    def begin_revoke(self, tps: set[TopicPart]) -> None:
        pass

    def in_flight(self, tps: set[TopicPart] | None = None) -> int:
        return 0

    def revoke(self, tp: TopicPart) -> None:
        self.revoked.append(tp)


class Consumer:
    """Refuses commits with ``error`` until ``refusals`` run out."""

    def __init__(self, error: int, refusals: int, clock: Clock | None = None) -> None:
        self.error, self.refusals, self.clock = error, refusals, clock
        self.commits: list[list[TopicPartition]] = []
        self.polls = 0  # consume calls: each answers the group (a rebalance's callbacks)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not asynchronous
        self.commits.append(offsets)
        if self.refusals > 0:
            self.refusals -= 1
            raise KafkaException(KafkaError(self.error))

    def consume(self, num_messages: int, timeout: float) -> list[object]:
        self.polls += 1
        if self.clock is not None:
            self.clock.now += timeout
        return []


class Producer:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def poll(self, timeout: float) -> int:
        self.clock.now += timeout
        return 0


class Outbox:
    def pump(self) -> None:
        pass


def _loop(consumer: Consumer, clock: Clock, engine: Engine) -> ConsumerLoop:
    return ConsumerLoop(
        consumer=consumer,  # type: ignore[arg-type]
        producer=Producer(clock),  # type: ignore[arg-type]
        engine=with_ports(engine),  # type: ignore[arg-type]
        codec=EnvelopeCodec(SchemaRegistry()),
        outbox=Outbox(),  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(),
        clock=clock,
    )


def _revoke(consumer: Consumer, clock: Clock, engine: Engine) -> None:
    loop = _loop(consumer, clock, engine)
    loop.rebalance.on_revoke(consumer, [TopicPartition(TP.topic, TP.partition)])  # type: ignore[arg-type]


def test_a_revoke_waits_out_a_moving_coordinator_and_commits() -> None:
    clock, engine = Clock(), Engine()
    consumer = Consumer(KafkaError._WAIT_COORD, refusals=5)
    _revoke(consumer, clock, engine)
    assert len(consumer.commits) == 6
    assert consumer.commits[-1][0].offset == POSITION[0]
    assert engine.accepted == [{TP: POSITION}]
    assert engine.revoked == [TP]


def test_a_revoke_gives_up_after_its_patience_and_lets_go() -> None:
    """The partition is the next owner's anyway: a revoke cannot hold it for ever."""
    clock, engine = Clock(), Engine()
    start = clock.now
    _revoke(Consumer(KafkaError.COORDINATOR_NOT_AVAILABLE, refusals=10_000), clock, engine)
    assert engine.accepted == []
    assert engine.revoked == [TP]
    assert HANDOVER_COMMIT_PATIENCE_S <= clock.now - start < HANDOVER_COMMIT_PATIENCE_S + 1


def test_a_revoke_does_not_wait_when_the_generation_is_over() -> None:
    """A fenced or expired member's commit will never be taken: let go at once."""
    clock, engine = Clock(), Engine()
    consumer = Consumer(KafkaError.ILLEGAL_GENERATION, refusals=10_000)
    _revoke(consumer, clock, engine)
    assert len(consumer.commits) == 1
    assert engine.revoked == [TP]


def test_a_revoke_does_not_wait_for_the_rebalance_it_is_part_of() -> None:
    """Inside the revoke callback the rebalance waits for this very callback."""
    clock, engine = Clock(), Engine()
    consumer = Consumer(KafkaError.REBALANCE_IN_PROGRESS, refusals=10_000, clock=clock)
    _revoke(consumer, clock, engine)
    assert len(consumer.commits) == 1 and consumer.polls == 0
    assert engine.revoked == [TP]


def test_the_shutdown_commit_answers_a_rebalance_in_progress_and_commits_after_it() -> None:
    """Another member joining as this one stops: the rebalance ends only once this
    consumer answers it (it polls, paused), then the commit is taken."""
    clock, engine = Clock(), Engine()
    consumer = Consumer(KafkaError.REBALANCE_IN_PROGRESS, refusals=3, clock=clock)
    _loop(consumer, clock, engine).commit(patience_s=HANDOVER_COMMIT_PATIENCE_S, serve_group=True)
    assert consumer.polls == 3 and len(consumer.commits) == 4
    assert engine.accepted == [{TP: POSITION}]


@pytest.mark.parametrize("error", [KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION])
def test_the_shutdown_commit_gives_up_on_a_rebalance_after_its_patience(error: int) -> None:
    clock, engine = Clock(), Engine()
    start = clock.now
    consumer = Consumer(error, refusals=10_000, clock=clock)
    _loop(consumer, clock, engine).commit(patience_s=HANDOVER_COMMIT_PATIENCE_S, serve_group=True)
    assert engine.accepted == []
    assert HANDOVER_COMMIT_PATIENCE_S <= clock.now - start < HANDOVER_COMMIT_PATIENCE_S + 1


def test_the_shutdown_commit_answers_a_generation_that_moved_on_and_commits_after_it() -> None:
    """Another member joined and this one rejoined while its commit was on the way:
    the commit carried the old generation. Answering the group gets the new one."""
    clock, engine = Clock(), Engine()
    consumer = Consumer(KafkaError.ILLEGAL_GENERATION, refusals=2, clock=clock)
    _loop(consumer, clock, engine).commit(patience_s=HANDOVER_COMMIT_PATIENCE_S, serve_group=True)
    assert consumer.polls == 2 and len(consumer.commits) == 3
    assert engine.accepted == [{TP: POSITION}]


@dataclass
class LosingEngine(Engine):
    """Answering the group ends in the partitions being lost (a fenced member)."""

    consumer: Consumer | None = None

    def commit_positions(
        self, only: set[TopicPart] | None = None
    ) -> dict[TopicPart, tuple[int, str]]:
        lost = self.consumer is not None and self.consumer.polls > 0
        return {} if lost else super().commit_positions(only)


def test_a_fenced_member_stops_once_its_partitions_are_lost() -> None:
    clock = Clock()
    consumer = Consumer(KafkaError.ILLEGAL_GENERATION, refusals=10_000, clock=clock)
    engine = LosingEngine(consumer=consumer)
    _loop(consumer, clock, engine).commit(patience_s=HANDOVER_COMMIT_PATIENCE_S, serve_group=True)
    assert consumer.polls == 1 and len(consumer.commits) == 1
    assert engine.accepted == []
