"""The ordering lane of a class partition just assigned is read on the loop's thread,
after the rebalance callback returned (N10): a large lane or slow brokers must not
keep the callback past ``max.poll.interval.ms``. Until its lane entries are read,
nothing of the partition runs, and a read cut short goes on over later turns.

The real loop and engine; a fake consumer serving one partition from a log, which
calls the rebalance callback from inside ``consume`` (as librdkafka does) and then
hands out what it fetched; an outbox that delivers every copy at once (a copy back
from the lane lands at the log's end); a fake lane feed that records its calls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from confluent_kafka import TopicPartition

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.core.copies import CopyKind
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job

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
    """One partition, fetched from ``position`` unless paused; ``rebalance`` is run
    inside the next ``consume``, before it fetches."""

    def __init__(self, log: list[bytes]) -> None:
        self.log = log
        self.position = COMMITTED
        self.paused: set[TopicPart] = set()
        self.rebalance: Callable[[], None] | None = None

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        if self.rebalance is not None:
            rebalance, self.rebalance = self.rebalance, None
            rebalance()
        if TP in self.paused:
            return []
        taken = self.log[self.position : self.position + num_messages]
        first, self.position = self.position, self.position + len(taken)
        return [Message(first + i, value) for i, value in enumerate(taken)]

    def seek(self, partition: TopicPartition) -> None:
        self.position = partition.offset

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {TopicPart(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.paused -= {TopicPart(p.topic, p.partition) for p in partitions}

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, COMMITTED) for p in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.log)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        pass

    def assignment(self) -> list[TopicPartition]:
        return []


class Outbox:
    def __init__(self, engine: LeaseEngine, consumer: Consumer) -> None:
        self.engine, self.consumer = engine, consumer

    def pump(self) -> None:
        self.engine.copies.take_statuses()
        for request in self.engine.copies.take():
            if request.kind is CopyKind.RETURN:
                assert request.lane is not None
                self.consumer.log.append(CODEC.encode(request.lane.job))
            self.engine.copies.delivered(request)

    def blocked(self) -> dict[TopicPart, str]:
        return {}


class Producer:
    def poll(self, timeout: float) -> int:
        return 0


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


def test_the_lane_is_read_after_the_callback_and_nothing_runs_before_it_is(
    tmp_path: Path,
) -> None:
    consumer = Consumer([CODEC.encode(job(i)) for i in range(5)])  # j2..j4 beyond the commit
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig())
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
    lane = Lane(slow=3)
    loop.lane = lane  # type: ignore[assignment]

    def rebalance() -> None:
        lane.in_callback = True
        loop.rebalance.on_assign(consumer, [TopicPartition(TP.topic, TP.partition)])  # type: ignore[arg-type]
        lane.in_callback = False

    consumer.rebalance = rebalance
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
