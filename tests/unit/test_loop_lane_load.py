"""The ordering lane of a class partition just assigned is read on the loop's thread,
after the rebalance callback returned (N10): a large lane or slow brokers must not
keep the callback past ``max.poll.interval.ms``. Until its lane entries are read,
nothing of the partition runs, and a read cut short goes on over later turns.

The real loop and engine over the in-memory Kafka (``memkafka``): its consumer runs
the rebalance callback from inside ``consume`` (as librdkafka does), then hands out
what it fetched; an outbox that delivers every copy at once (a copy back from the
lane lands at the partition's end); a fake lane feed that records its calls."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import Consumer, KafkaSettings, TopicPartition, make_consumer, make_producer
from jobcore.topics import QueueTopics
from leasekeeper.core.copies import CopyKind
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId
from memkafka import Cluster, installed
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

SETTINGS = KafkaSettings(bootstrap="memory")
CODEC = EnvelopeCodec(SchemaRegistry())
TOPICS = QueueTopics(queue="q")
TP = TopicPart(TOPICS.ready, 0)
KEY = "user-42"
COMMITTED = 2  # j0 and j1 left the partition to the lane under the previous owner


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Outbox:
    def __init__(self, engine: LeaseEngine, cluster: Cluster) -> None:
        self.engine, self.cluster = engine, cluster

    def pump(self) -> None:
        self.engine.copies.take_statuses()
        for request in self.engine.copies.take():
            if request.kind is CopyKind.RETURN:
                assert request.lane is not None
                self.cluster.append(TP.topic, TP.partition, b"t1",
                                    CODEC.encode(request.lane.job), None)  # fmt: skip
            self.engine.copies.delivered(request)

    def blocked(self) -> dict[TopicPart, str]:
        return {}


def job(i: int) -> Job:
    return Job(job_id=f"j{i}", queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, ordering_key=KEY)  # fmt: skip


class Lane:
    """The previous owner's j0 (retrying, due) and j1 (held behind it); a read that
    takes ``slow`` turns. Every call is recorded, and whether a callback was running."""

    def __init__(self, slow: int) -> None:
        self.slow = slow
        self.in_callback = False
        self.calls: list[tuple[str, bool]] = []
        line = LineId(topic=TP.topic, partition=TP.partition, tenant="t1", key=KEY)
        self.held = [
            LaneEntry(line=line, seq=0, job=replace(job(0), ordering_seq=0),
                      state=LaneState.RETRYING, reason="boom"),
            LaneEntry(line=line, seq=1, job=replace(job(1), ordering_seq=1),
                      state=LaneState.HELD, reason="behind 0"),
        ]  # fmt: skip

    def catch_up(self, timeout_s: float = 60.0) -> None:
        self.calls.append(("catch_up", self.in_callback))

    def entries(self, tp: TopicPart) -> list[LaneEntry]:
        self.calls.append(("entries", self.in_callback))
        return self.held

    def load(self, tps: set[TopicPart], timeout_s: float) -> dict[TopicPart, list[LaneEntry]]:
        self.calls.append(("load", self.in_callback))
        if self.slow:
            self.slow -= 1
            raise TimeoutError("the lane is slow")
        return {tp: self.held for tp in tps}

    def let_go(self, tps: set[TopicPart]) -> None:
        pass

    def poll(self) -> None:
        pass


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """One partition holding j0..j4, the group's commit at j2."""
    with installed(Cluster()) as memory:
        memory.create_topic(TP.topic, 1)
        for i in range(5):
            memory.append(TP.topic, TP.partition, b"t1", CODEC.encode(job(i)), None)
        memory.commit(TOPICS.consumer_group, {(TP.topic, TP.partition): (COMMITTED, None)})
        yield memory


def test_the_lane_is_read_after_the_callback_and_nothing_runs_before_it_is(
    cluster: Cluster, tmp_path: Path
) -> None:
    consumer = make_consumer(SETTINGS, TOPICS.consumer_group)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig())
    clock = Clock()
    loop = ConsumerLoop(
        consumer=consumer,
        producer=make_producer(SETTINGS),
        engine=engine,
        codec=CODEC,
        outbox=Outbox(engine, cluster),  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(batch_size=5, poll_timeout_s=0.0),  # no real-clock waits
        clock=clock,
    )
    lane = Lane(slow=3)
    loop.lane = lane  # type: ignore[assignment]

    def on_assign(member: Consumer, partitions: list[TopicPartition]) -> None:
        lane.in_callback = True
        loop.rebalance.on_assign(member, partitions)
        lane.in_callback = False

    consumer.subscribe([TP.topic], on_assign=on_assign)  # run inside the first consume
    started: list[str] = []
    started_when_read: list[int] = []
    for _ in range(40):
        loop._step()
        grants = engine.workers.claim("w", 100, wait_s=0)
        started += [g.job.job_id for g in grants if g.job is not None]
        started_when_read += [sum(name == "load" for name, _ in lane.calls)] * len(grants)
        acks = [Settlement(lease_id=g.lease_id, token=g.token, outcome=SettleKind.ACK)
                for g in grants]  # fmt: skip
        engine.workers.settle(acks)
        clock.now += 0.01
    assert lane.calls and not any(during for _, during in lane.calls)  # none in the callback
    assert [name for name, _ in lane.calls] == ["load"] * 4  # three cut short, then read
    assert started_when_read and min(started_when_read) == 4  # nothing ran before
    assert started == ["j0", "j1", "j2", "j3", "j4"]  # the lane's first, in key order
