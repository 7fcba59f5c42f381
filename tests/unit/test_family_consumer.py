"""One consumer per topic family, looking like one to the loop (balanced assignment)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from jobcore.priority import PriorityClasses
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.engine import LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.family_consumer import (
    FamilyConsumer,
    family_instance_id,
    topic_families,
)
from schemas.codec import EnvelopeCodec
from tests.unit.engine_ports import with_ports

TOPICS = QueueTopics(queue="emails")
CLASSES = PriorityClasses().names
TIER_TOPICS = DelayTiers().topics(TOPICS, CLASSES)


class FakeConsumer:
    """Records what it was asked; hands out the records it was given."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.topics: list[str] = []
        self.records: list[str] = []
        self.calls: list[tuple[str, Any]] = []
        self.fail_commit = False

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.topics = topics

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self.calls.append(("consume", timeout))
        taken, self.records = self.records[:num_messages], self.records[num_messages:]
        return cast(list[Message], taken)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("pause", [tp.topic for tp in partitions]))

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.calls.append(("resume", [tp.topic for tp in partitions]))

    def seek(self, partition: TopicPartition) -> None:
        self.calls.append(("seek", partition.topic))

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> Any:
        if self.fail_commit:
            raise KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT))
        self.calls.append(("commit", [tp.topic for tp in offsets]))
        return None if asynchronous else offsets

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, 0) for t in self.topics]

    def close(self) -> None:
        self.calls.append(("close", None))


@pytest.fixture
def made() -> dict[str, FakeConsumer]:
    return {}


@pytest.fixture
def consumer(made: dict[str, FakeConsumer]) -> FamilyConsumer:
    def make(family: str) -> Consumer:
        made[family] = FakeConsumer(family)
        return cast(Consumer, made[family])

    family_of = topic_families(TOPICS, CLASSES, TIER_TOPICS)
    fc = FamilyConsumer(make=make, family_of=family_of, clock=lambda: 0.0)
    fc.subscribe([*TOPICS.classes(CLASSES), *TIER_TOPICS, TOPICS.overflow])
    return fc


def test_each_class_and_the_tiers_get_a_consumer_of_their_own(
    made: dict[str, FakeConsumer],
) -> None:
    family_of = topic_families(TOPICS, CLASSES, TIER_TOPICS)
    assert family_of("jobs.emails") == "default"
    assert family_of("jobs.emails.critical") == "critical"
    assert family_of("jobs.emails.bulk.retry.1m") == "tiers"
    assert family_of("jobs.emails.overflow") == "overflow"
    assert family_of("jobs.other") == "jobs.other", "any other: its own"
    assert family_instance_id("lk-1", "critical") == "lk-1.critical"


def test_subscribe_splits_the_topics_by_family(
    consumer: FamilyConsumer, made: dict[str, FakeConsumer]
) -> None:
    assert set(made) == {"default", "critical", "bulk", "tiers", "overflow"}
    assert made["critical"].topics == ["jobs.emails.critical"]
    assert made["tiers"].topics == list(TIER_TOPICS)
    assert len(consumer.assignment()) == len(TIER_TOPICS) + 4


def test_calls_go_to_the_family_of_each_partition(
    consumer: FamilyConsumer, made: dict[str, FakeConsumer]
) -> None:
    bulk, tier = TopicPartition("jobs.emails.bulk", 1), TopicPartition(TIER_TOPICS[0], 1)
    consumer.pause([bulk, tier])
    consumer.resume([tier])
    consumer.seek(TopicPartition(TIER_TOPICS[1], 0, 5))
    assert made["bulk"].calls == [("pause", ["jobs.emails.bulk"])]
    assert made["tiers"].calls == [
        ("pause", [TIER_TOPICS[0]]), ("resume", [TIER_TOPICS[0]]), ("seek", TIER_TOPICS[1]),
    ]  # fmt: skip
    assert made["default"].calls == []


def test_a_commit_is_made_by_each_family_and_a_failure_raised_after_all(
    consumer: FamilyConsumer, made: dict[str, FakeConsumer]
) -> None:
    offsets = [TopicPartition("jobs.emails", 0, 3), TopicPartition("jobs.emails.critical", 0, 4)]
    assert consumer.commit(offsets=offsets, asynchronous=False) == offsets
    made["default"].fail_commit = True
    with pytest.raises(KafkaException):
        consumer.commit(offsets=offsets, asynchronous=True)
    assert made["critical"].calls[-1] == ("commit", ["jobs.emails.critical"]), "tried anyway"


def test_consume_takes_from_every_family_starting_one_further_each_time(
    consumer: FamilyConsumer, made: dict[str, FakeConsumer]
) -> None:
    made["default"].records = ["d1", "d2", "d3"]
    made["bulk"].records = ["b1"]
    first = cast(list[str], consumer.consume(num_messages=2, timeout=0))
    second = cast(list[str], consumer.consume(num_messages=2, timeout=0))
    assert sorted(first + second) == ["b1", "d1", "d2", "d3"]
    assert "b1" in first + second[:1], "a busy family does not take every fetch"


def test_with_nothing_fetched_every_consumer_is_waited_on_in_short_slices(
    made: dict[str, FakeConsumer],
) -> None:
    now = [0.0]

    def make(family: str) -> Consumer:
        made[family] = FakeConsumer(family)
        return cast(Consumer, made[family])

    def clock() -> float:
        now[0] += 0.001
        return now[0]

    fc = FamilyConsumer(make=make, family_of=topic_families(TOPICS, CLASSES, TIER_TOPICS),
                        clock=clock, slice_s=0.003)  # fmt: skip
    fc.subscribe([*TOPICS.classes(CLASSES), *TIER_TOPICS])
    assert fc.consume(num_messages=5, timeout=0.05) == []
    for fake in made.values():
        waits = [t for kind, t in fake.calls if kind == "consume" and t > 0]
        assert waits and max(waits) <= 0.003, fake.family  # each polled, none for long


def test_close_closes_every_family(consumer: FamilyConsumer, made: dict[str, FakeConsumer]) -> None:
    consumer.close()
    assert all(fake.calls[-1] == ("close", None) for fake in made.values())


class Engine:
    """Two partitions, each finished up to an offset; records what Kafka took."""

    def __init__(self) -> None:
        self.positions = {READY: (7, ""), CRITICAL: (9, "")}
        self.accepted: list[dict[TopicPart, tuple[int, str]]] = []

    def commit_soon(self) -> bool:
        return False

    def commit_positions(self, only: set[TopicPart] | None = None) -> dict[TopicPart, Any]:
        return dict(self.positions)

    def committed(self, positions: dict[TopicPart, tuple[int, str]]) -> None:
        self.accepted.append(dict(positions))


READY, CRITICAL = TopicPart("jobs.emails", 0), TopicPart("jobs.emails.critical", 0)


def test_an_asynchronous_commit_answered_per_family_is_done_once_every_part_is(
    consumer: FamilyConsumer, made: dict[str, FakeConsumer]
) -> None:
    engine = Engine()
    loop = ConsumerLoop(consumer=consumer, producer=cast(Producer, None),
                        engine=cast(LeaseEngine, with_ports(engine)),
                        codec=cast(EnvelopeCodec, None),
                        outbox=cast(CopySender, None), topics=TOPICS,
                        gate=TierGate(DelayTiers(), TOPICS), config=LoopConfig(),
                        clock=lambda: 0.0)  # fmt: skip
    loop._commit_async()
    assert made["default"].calls[-1] == ("commit", ["jobs.emails"])
    loop.on_commit(None, [TopicPartition("jobs.emails", 0, 7)])
    assert engine.accepted == [{READY: (7, "")}], "each part counts when it is answered"
    sent = len(made["critical"].calls)
    loop._commit_async()
    assert len(made["critical"].calls) == sent, "no second commit while a part is unanswered"
    loop.on_commit(None, [TopicPartition("jobs.emails.critical", 0, 9)])
    assert engine.accepted[-1] == {CRITICAL: (9, "")} and loop.commits == 1
    loop._commit_async()
    assert len(made["critical"].calls) == sent + 1, "answered in full: the next one goes"


def test_a_run_first_family_gets_its_share_of_each_call_first(
    made: dict[str, FakeConsumer],
) -> None:
    """A flood in one family must not hold a critical record back for a call per
    family: wherever the turn begins, the critical record comes with the first call."""

    def make(family: str) -> Consumer:
        made[family] = FakeConsumer(family)
        return cast(Consumer, made[family])

    fc = FamilyConsumer(make=make, family_of=topic_families(TOPICS, CLASSES, TIER_TOPICS),
                        first=frozenset({"critical"}))  # fmt: skip
    fc.subscribe([*TOPICS.classes(CLASSES), *TIER_TOPICS, TOPICS.overflow])
    for start in range(len(made)):
        made["default"].records = [f"d{n}" for n in range(1_000)]
        made["critical"].records = ["c1"]
        taken = cast(list[str], fc.consume(num_messages=500, timeout=0))
        assert "c1" in taken and len(taken) == 500, start
