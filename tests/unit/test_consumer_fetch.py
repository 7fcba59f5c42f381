"""The consumer loop hands a fetched record on when it arrives, not at the poll timeout.

The fake consumer keeps librdkafka's batch rule on a driven clock: ``consume(n,
timeout)`` returns once it holds ``n`` records or the timeout has passed, whichever
comes first; records (memkafka's messages) become available at their arrival time.
memkafka's own consumer cannot stand in: it returns at the first record, on the real
clock, so it would hide the very wait these tests are about.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from memkafka import MemoryMessage
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from tests.unit.engine_ports import with_ports

CODEC = EnvelopeCodec(SchemaRegistry())
TOPICS = QueueTopics(queue="q")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class BatchingConsumer:
    """``consume`` as librdkafka serves a batch: full, or at the end of the timeout."""

    def __init__(self, clock: Clock, arrivals: list[tuple[float, MemoryMessage]]) -> None:
        self.clock = clock
        self.arrivals = sorted(arrivals, key=lambda a: a[0])

    def consume(self, num_messages: int, timeout: float) -> list[MemoryMessage]:
        deadline = self.clock.now + timeout
        times = [at for at, _ in self.arrivals]
        if len(times) >= num_messages and times[num_messages - 1] <= deadline:
            self.clock.now = max(self.clock.now, times[num_messages - 1])
        else:
            self.clock.now = deadline
        taken = [r for at, r in self.arrivals if at <= self.clock.now][:num_messages]
        self.arrivals = self.arrivals[len(taken) :]
        return taken

    def assignment(self) -> list[object]:
        return []


@dataclass
class Engine:
    """Records when each job was offered; everything else is idle."""

    clock: Clock
    offered: list[tuple[float, int]] = field(default_factory=list)
    window_records: int = 1000

    def window_room(self) -> int:
        return self.window_records

    def over_span(self) -> set[TopicPart]:
        return set()

    def overflow_floods(self, over: set[TopicPart], slice_: int) -> int:
        return 0

    def copying(self, limit: int, unsaved: int) -> set[TopicPart]:
        return set()

    def overflow_watched(self) -> set[int]:
        return set()

    def offer(self, tp: TopicPart, offset: int, job: Job, envelope: bytes) -> None:
        self.offered.append((self.clock.now, offset))

    def promote_due(self) -> int:
        return 0

    def park_excess(self) -> int:
        return 0

    def expire(self) -> int:
        return 0

    def sweep_unhandled(self) -> int:
        return 0

    def prune_notes(self) -> int:
        return 0

    def commit_soon(self) -> bool:
        return False

    def commit_positions(self) -> dict[TopicPart, tuple[int, str]]:
        return {}


class Idle:
    """The outbox and producer: nothing to send."""

    def pump(self) -> None:
        pass

    def blocked(self) -> list[TopicPart]:
        return []

    def poll(self, timeout: float) -> int:
        return 0


def _loop(clock: Clock, consumer: BatchingConsumer, engine: Engine) -> ConsumerLoop:
    idle = Idle()
    return ConsumerLoop(
        consumer=consumer,  # type: ignore[arg-type]
        producer=idle,  # type: ignore[arg-type]
        engine=with_ports(engine),  # type: ignore[arg-type]
        codec=CODEC,
        outbox=idle,  # type: ignore[arg-type]
        topics=TOPICS,
        gate=TierGate(DelayTiers(), TOPICS),
        config=LoopConfig(batch_size=500, poll_timeout_s=0.05),
        clock=clock,
    )


def _record(offset: int) -> MemoryMessage:
    """Job ``j<offset>`` at ``offset`` of the ready topic, without job headers (the loop
    decodes the envelope)."""
    job = Job(job_id=f"j{offset}", queue="q", tenant_id="t", type="noop", payload=b"",
              created_at_ms=1)  # fmt: skip
    return MemoryMessage(TOPICS.ready, 0, offset, key=b"tenant", value=CODEC.encode(job))


def test_a_record_reaches_the_engine_when_it_arrives_not_when_the_poll_times_out() -> None:
    clock = Clock()
    arrives = clock.now + 0.001
    consumer = BatchingConsumer(clock, [(arrives, _record(7))])
    engine = Engine(clock)
    _loop(clock, consumer, engine)._step()
    assert engine.offered == [(arrives, 7)]


def test_records_already_fetched_are_taken_together_without_waiting() -> None:
    clock = Clock()
    start = clock.now
    records = [(start, _record(n)) for n in range(3)]
    consumer = BatchingConsumer(clock, records)
    engine = Engine(clock)
    _loop(clock, consumer, engine)._step()
    assert engine.offered == [(start, 0), (start, 1), (start, 2)]


def test_records_arriving_with_the_first_are_taken_in_the_same_step() -> None:
    clock = Clock()
    first = clock.now + 0.002
    records = [(first, _record(n)) for n in range(3)]
    consumer = BatchingConsumer(clock, records)
    engine = Engine(clock)
    _loop(clock, consumer, engine)._step()
    assert [offset for _, offset in engine.offered] == [0, 1, 2]
    assert {at for at, _ in engine.offered} == {first}


def test_an_idle_step_waits_out_the_poll_timeout() -> None:
    """Nothing to fetch: the loop still blocks in Kafka rather than spinning."""
    clock = Clock()
    start = clock.now
    engine = Engine(clock)
    _loop(clock, BatchingConsumer(clock, []), engine)._step()
    assert engine.offered == [] and clock.now == start + 0.05


class Committing(BatchingConsumer):
    """Records the asynchronous commits a step sends."""

    def __init__(self, clock: Clock, arrivals: list[tuple[float, MemoryMessage]]) -> None:
        super().__init__(clock, arrivals)
        self.commits: list[float] = []

    def commit(self, offsets: list[object], asynchronous: bool) -> None:
        self.commits.append(self.clock.now)


@dataclass
class PilingUp(Engine):
    """Finished jobs pile up: half of what holds leasing back waits for a commit."""

    soon: bool = True

    def commit_soon(self) -> bool:
        return self.soon

    def commit_positions(self) -> dict[TopicPart, tuple[int, str]]:
        return {TopicPart(TOPICS.ready, 0): (5, "")}


def test_finished_jobs_piling_up_are_committed_before_the_interval() -> None:
    """Leasing stops while too many finished jobs wait for a commit; half that many
    are committed at once, not at the next 100 ms tick."""
    clock = Clock()
    consumer = Committing(clock, [(clock.now, _record(0))])
    loop = _loop(clock, consumer, PilingUp(clock))
    loop._step()
    assert consumer.commits == [clock.now], "committed in the first step, 0 ms in"
    engine = PilingUp(clock, soon=False)
    quiet = Committing(clock, [(clock.now, _record(0))])
    _loop(clock, quiet, engine)._step()
    assert quiet.commits == [], "nothing piled up: the interval decides"


def test_an_idle_step_waits_no_longer_than_the_next_commit() -> None:
    """A paused loop blocked in Kafka must not hold back a commit that is due."""
    clock = Clock()
    consumer = Committing(clock, [])
    loop = _loop(clock, consumer, PilingUp(clock, soon=False))
    clock.now += 0.09  # 10 ms before the first commit is due
    start = clock.now
    loop._step()
    assert clock.now == pytest.approx(start + 0.01), "woke when the commit fell due"
    while not consumer.commits:
        loop._step()
    assert consumer.commits[0] <= start + 0.012, "committed within a millisecond of it"
