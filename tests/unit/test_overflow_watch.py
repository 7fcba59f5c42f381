"""The consumer loop's side of the overflow lane, with a fake engine and consumer:
only ready (class) partitions move a flood; the lane's committed offsets are read
from Kafka at most once per interval, and only while a tenant is in overflow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jobcore.kafka import TopicPartition
from leasekeeper.core.leases import TopicPart
from leasekeeper.overflow.watch import MAX_COPIES_IN_FLIGHT, MAX_UNSAVED_COPIES, OverflowWatch
from tests.unit.engine_ports import with_ports


@dataclass
class Engine:
    window_records: int = 100
    watched: set[int] = field(default_factory=set)
    floods: list[tuple[set[TopicPart], int]] = field(default_factory=list)
    committed: list[dict[int, int]] = field(default_factory=list)
    copying_limits: list[tuple[int, int]] = field(default_factory=list)

    def overflow_floods(self, over: set[TopicPart], slice_: int) -> int:
        self.floods.append((over, slice_))
        return len(over)

    def overflow_watched(self) -> set[int]:
        return self.watched

    def overflow_committed(self, committed: Mapping[int, int]) -> None:
        self.committed.append(dict(committed))

    def copying(self, limit: int, unsaved: int) -> set[TopicPart]:
        self.copying_limits.append((limit, unsaved))
        return {TopicPart("jobs.q", 0)}


class Consumer:
    def __init__(self) -> None:
        self.asked: list[list[tuple[str, int]]] = []

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asked.append([(p.topic, p.partition) for p in partitions])
        return [TopicPartition(p.topic, p.partition, -1001 if p.partition else 42)
                for p in partitions]  # fmt: skip


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(engine: Engine, clock: Clock) -> OverflowWatch:
    return OverflowWatch(overflow=with_ports(engine).overflow,  # type: ignore[attr-defined]
                         window_records=engine.window_records, overflow_topic="jobs.q.overflow",
                         sources=frozenset({"jobs.q", "jobs.q.bulk"}), clock=clock)  # fmt: skip


def test_only_ready_partitions_move_a_flood_with_the_slice_of_the_pause() -> None:
    engine = Engine()
    over = {
        TopicPart("jobs.q", 0),
        TopicPart("jobs.q.retry.1s", 0),
        TopicPart("jobs.q.overflow", 0),
    }
    assignment = over | {TopicPart("jobs.q.bulk", 0)}
    assert watch(engine, Clock()).move_floods(over, assignment) == 1
    assert engine.floods == [({TopicPart("jobs.q", 0)}, 100 // 4)]
    assert watch(engine, Clock()).move_floods({TopicPart("jobs.q.overflow", 1)}, assignment) == 0


def test_the_slice_counts_the_sharing_units_of_the_pause_not_the_partitions() -> None:
    """The delay tiers of a class and partition share one share of the window (the
    pause's ``unit``); the flood's slice must be that same share."""
    engine = Engine()
    ready = TopicPart("jobs.q", 0)
    tiers = {TopicPart(f"jobs.q.retry.{t}", 0) for t in ("1s", "10s", "1m", "10m", "1h")}

    def unit(tp: TopicPart) -> object:
        return "tiers" if tp in tiers else tp

    assert watch(engine, Clock()).move_floods({ready}, {ready} | tiers, unit) == 1
    assert engine.floods == [({ready}, 100 // 2)]


def test_partitions_with_too_many_copies_on_their_way_pause() -> None:
    engine = Engine()
    assert watch(engine, Clock()).copying({TopicPart("jobs.q", 0)}) == {TopicPart("jobs.q", 0)}
    assert watch(engine, Clock()).copying({TopicPart("jobs.q", 1)}) == set()
    assert engine.copying_limits == [(MAX_COPIES_IN_FLIGHT, MAX_UNSAVED_COPIES)] * 2


def test_the_lanes_commits_are_read_once_per_interval_while_a_tenant_is_in_overflow() -> None:
    engine, clock, consumer = Engine(), Clock(), Consumer()
    lane = watch(engine, clock)
    lane.poll(consumer)  # type: ignore[arg-type]
    assert consumer.asked == [], "nobody in overflow: Kafka is not asked"
    engine.watched = {0, 1}
    clock.now = 1.0
    lane.poll(consumer)  # type: ignore[arg-type]
    lane.poll(consumer)  # type: ignore[arg-type]
    assert consumer.asked == [[("jobs.q.overflow", 0), ("jobs.q.overflow", 1)]]
    assert engine.commits.committed == [{0: 42, 1: 0}], "no commit yet is the partition's start"
    clock.now = 2.0
    lane.poll(consumer)  # type: ignore[arg-type]
    assert len(consumer.asked) == 2
