"""Class partitions assigned whose ordering-lane entries are not read yet.

Why not in the rebalance callback: reading the lane takes as long as the lane is
large and the brokers are slow, and a callback that outlasts
``max.poll.interval.ms`` gets the member thrown out of the group, which assigns
the partitions again, which reads the lane again: a rebalance loop. So the
callback only notes the class partitions (``assigned``); the loop reads their end
offsets and their lane entries on its own thread (``step``), a bounded time per
turn, and goes on where it stopped on the next turn when that was not enough.

Why the partitions are not fetched meanwhile: a line must know what of it is in
the lane before any of its jobs is offered (a fetched job whose seq is in the
lane is a duplicate of a held one; see ``KeyBook.offer``). The loop pauses them
(``waiting``) and hands back anything fetched of them before the pause took
(``admit``: dropped, the partition sought back to it). Once read, they are
handed to the engine with their end offset (``KeyBook.assign``) and settle as
every assigned partition does (``ordering_settling``).
"""

from __future__ import annotations

import logging

from jobcore.kafka import Consumer, KafkaException, Message, TopicPartition
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.log_lines import partitions_line
from leasekeeper.ordering.lane import LaneFeed
from leasekeeper.ordering.port import OrderingPort

__all__ = ["LOAD_TURN_S", "LaneLoads"]

log = logging.getLogger(__name__)

# How long one turn of the loop reads the lane for partitions just assigned
# (seconds); the rest waits for the next turns.
LOAD_TURN_S = 1.0


class LaneLoads:
    """The class partitions assigned and not yet given their lane entries."""

    def __init__(self, ordering: OrderingPort, turn_s: float = LOAD_TURN_S) -> None:
        self._ordering = ordering
        self._turn_s = turn_s
        # Each waiting partition's consumer (to read its end offset) and end offset.
        self._consumers: dict[TopicPart, Consumer] = {}
        self._ends: dict[TopicPart, int] = {}
        self._failing = False

    def assigned(self, consumer: Consumer, tps: list[TopicPart]) -> None:
        """Called in the rebalance callback: notes the partitions, reads nothing."""
        for tp in tps:
            self._consumers[tp] = consumer
            self._ends.pop(tp, None)

    def forget(self, tps: set[TopicPart], lane: LaneFeed | None) -> None:
        for tp in tps:
            self._consumers.pop(tp, None)
            self._ends.pop(tp, None)
        if lane is not None:
            lane.let_go(tps)

    def waiting(self) -> set[TopicPart]:
        return set(self._consumers)

    def admit(self, messages: list[Message]) -> list[Message]:
        """``messages`` without those of waiting partitions, each such partition sought
        back to the first of them (fetched again once its lane entries are read)."""
        if not self._consumers:
            return messages
        kept: list[Message] = []
        back: dict[TopicPart, tuple[Consumer, int]] = {}
        for message in messages:
            tp = TopicPart(message.topic(), message.partition())  # type: ignore[arg-type]
            consumer = self._consumers.get(tp)
            if consumer is None or message.error() is not None:
                kept.append(message)
            elif tp not in back:
                back[tp] = (consumer, message.offset())  # type: ignore[assignment]
        for tp, (consumer, offset) in back.items():
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        return kept

    def step(self, lane: LaneFeed | None) -> None:
        """Read what the waiting partitions need, for at most a turn's time; hand those
        read to the engine. A failure is retried on the next turn."""
        if not self._consumers:
            return
        if lane is None:  # not connected yet: ordering within this life only
            self._consumers.clear()
            return
        tps = set(self._consumers)
        try:
            for tp in tps - self._ends.keys():
                part = TopicPartition(tp.topic, tp.partition)
                _, high = self._consumers[tp].get_watermark_offsets(part, timeout=self._turn_s)
                self._ends[tp] = int(high)
            loaded = lane.load(tps, timeout_s=self._turn_s)
        except (TimeoutError, KafkaException) as exc:
            if not self._failing:
                log.info("reading the ordering lane for %s goes on next turn (%s)",
                         partitions_line((tp.topic, tp.partition) for tp in tps), exc)  # fmt: skip
            self._failing = True
            return
        self._failing = False
        for tp in tps:
            self._ordering.assign_lines(tp, self._ends.pop(tp), loaded.get(tp, []))
            del self._consumers[tp]
