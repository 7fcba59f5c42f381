"""The group's rebalance callbacks: partitions assigned, handed over, or lost.

An assigned partition is taken from its committed offset (with what the previous
owner left in the commit metadata). A partition handed over (revoked) stops
dispatching, lets its jobs in flight finish within the grace period, commits what
is resolved and the progress beyond it, then goes. A lost one (the session expired)
goes at once: its jobs in flight run again on the next owner.

``Assignment`` is what the consumer loop holds, kept here so that no step rebuilds
it from the consumer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from jobcore.kafka import Consumer, ErrorWatch, Producer, TopicPartition
from jobcore.kafka_retry import Backoff, until_done
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.log_lines import partitions_line
from leasekeeper.core.partition_port import PartitionPort
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.core.worker_port import WorkerPort
from leasekeeper.kafka.committer import HANDOVER_COMMIT_PATIENCE_S, Committer
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.family_consumer import FamilyConsumer
from leasekeeper.ordering.lane import LaneFeed
from leasekeeper.ordering.lane_loads import LaneLoads

__all__ = ["Assignment", "Rebalance"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Assignment:
    """The partitions this leasekeeper holds, and those assigned since the loop's
    last step (resumed explicitly: librdkafka keeps a pause across a move)."""

    parts: set[TopicPart] = field(default_factory=set)
    fresh: set[TopicPart] = field(default_factory=set)


class Rebalance:
    def __init__(
        self,
        *,
        assignment: Assignment,
        partitions: PartitionPort,
        workers: WorkerPort,
        committer: Committer,
        outbox: CopySender,
        producer: Producer,
        gate: TierGate,
        lanes: LaneLoads,
        lane: Callable[[], LaneFeed | None],
        consumer: Callable[[], Consumer | FamilyConsumer],
        stop: Callable[[], threading.Event],
        watch: ErrorWatch,
        backoff: Backoff,
        clock: Callable[[], float],
        drain_grace_s: float,
    ) -> None:
        """``consumer``: the loop's consumer now (a rejoin makes a new one); ``stop``:
        the loop's stop event (reading commits after an assignment gives up on it);
        ``lane``: the ordering lane the loop follows, if any."""
        self.assignment = assignment
        self._partitions = partitions
        self._workers = workers
        self._committer = committer
        self._outbox = outbox
        self._producer = producer
        self._gate = gate
        self._lanes = lanes
        self._lane = lane
        self._consumer = consumer
        self._stop = stop
        self._watch = watch
        self._backoff = backoff
        self._clock = clock
        self._drain_grace_s = drain_grace_s
        # The family consumers (see family_consumer.py) that applied an assignment.
        self._assigned_once: set[int] = set()

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = until_done(
            lambda: consumer.committed(partitions, timeout=10),
            what="reading the committed offsets of assigned partitions",
            stop=self._stop(),
            watch=self._watch,
            backoff=self._backoff,
        )
        for tp in committed:
            part = TopicPart(tp.topic, tp.partition)
            self._partitions.assign(part, tp.offset, tp.metadata)
            self.assignment.parts.add(part)
            self.assignment.fresh.add(part)
        if self._lane() is not None:  # else ordering within this life only (not connected)
            tps = [TopicPart(tp.topic, tp.partition) for tp in committed]
            self._lanes.assigned(
                consumer, [tp for tp in tps if self._gate.tier_of(tp.topic) is None]
            )
        self._assigned_once.add(id(consumer))
        if self._every_family_assigned():
            self._partitions.assignment_received()
        log.info("assigned %s", partitions_line((tp.topic, tp.partition) for tp in committed))
        log.debug("committed offsets %s", [(tp.topic, tp.partition, tp.offset) for tp in committed])

    def _every_family_assigned(self) -> bool:
        """Whether every consumer of this leasekeeper applied its first assignment.
        Each family's consumer gets its own, one after another: settling in ends
        only after the last, or the held acks of a class whose partitions come
        later are refused as unknown and their jobs run again."""
        families = getattr(self._consumer(), "families", None)
        if families is None:  # one plain consumer
            return True
        return all(id(c) in self._assigned_once for c in families.values())

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Hand partitions over: stop dispatching them, let their jobs in flight finish
        within the grace period, commit what is resolved (and the progress beyond it),
        then let go. Jobs still leased after the grace are run again by the next owner."""
        moving = {TopicPart(tp.topic, tp.partition) for tp in partitions}
        self._gate.forget(moving)
        self._lanes.forget(moving, self._lane())
        self._partitions.begin_revoke(moving)
        left = self.drain(moving)
        self._committer.commit(only=moving, patience_s=HANDOVER_COMMIT_PATIENCE_S)
        for tp in moving:
            self._partitions.revoke(tp)
        self.assignment.parts -= moving
        where = partitions_line((tp.topic, tp.partition) for tp in moving)
        log.info("revoked %s (%d jobs still in flight after the grace period)", where, left)

    def drain(self, tps: set[TopicPart] | None) -> int:
        """Serve delivery reports until ``tps`` have nothing in flight or the grace ends."""
        deadline = self._clock() + self._drain_grace_s
        while self._partitions.in_flight(tps) and self._clock() < deadline:
            self._outbox.pump()
            self._producer.poll(0.05)
            self._workers.expire()
        return self._partitions.in_flight(tps)

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {TopicPart(tp.topic, tp.partition) for tp in partitions}
        log.warning(
            "lost %s (the group's session expired); their jobs in flight run again "
            "on the next owner",
            partitions_line((tp.topic, tp.partition) for tp in lost),
        )
        self.let_go(lost)

    def let_go(self, lost: set[TopicPart]) -> None:
        """Partitions gone without a handover: forget them here at once."""
        self._gate.forget(lost)
        self._lanes.forget(lost, self._lane())
        for tp in lost:
            self._partitions.revoke(tp)
        self.assignment.parts -= lost

    def let_go_all(self) -> None:
        """The consumer failed for good: every partition is another member's now."""
        self.let_go(set(self._partitions.assigned()))
        self.assignment.parts.clear()
