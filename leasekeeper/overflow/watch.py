"""The consumer loop's side of the overflow lane: when to move a flood, when a tenant
is back.

The loop knows when the window is full and which partitions it pauses for holding
their share; a ready (class) partition paused so may be flooded by one tenant,
whose excess then moves to the overflow lane (``OverflowPort.floods``).
A tenant comes back once the group's committed offset of the overflow partition
has passed its last moved record: that offset is read from Kafka, because the
overflow partition may be owned by another leasekeeper. It is asked for at most
once per ``interval_s``, and only while some tenant is in overflow here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from jobcore.kafka import KafkaException, TopicPartition
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.window import window_slice
from leasekeeper.overflow.port import OverflowPort

log = logging.getLogger(__name__)


class CommitsReader(Protocol):
    """What the watch asks of the loop's consumer (one consumer, or one per family)."""

    def committed(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]: ...


# How often the overflow partitions' committed offsets are read while a tenant is
# in overflow: a returning tenant waits this much longer at most.
INTERVAL_S = 1.0
# How long one read may block the loop.
TIMEOUT_S = 2.0
# A partition with this many copies decided and not yet delivered is not fetched
# further: a flood moving aside must not queue copies faster than Kafka takes them.
MAX_COPIES_IN_FLIGHT = 2_000
# A partition with this many copies to the overflow lane in no accepted commit is not
# fetched further until a commit lands: what a move after a coordinator failure
# copies again stays bounded.
MAX_UNSAVED_COPIES = 10_000


class OverflowWatch:
    def __init__(
        self,
        *,
        overflow: OverflowPort,
        window_records: int,
        overflow_topic: str,
        sources: frozenset[str],
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``sources``: the ready (class) topics whose floods move to ``overflow_topic``."""
        self._overflow = overflow
        self._window_records = window_records
        self._topic = overflow_topic
        self._sources = sources
        self._interval_s = interval_s
        self._clock = clock
        self._next = 0.0

    def move_floods(
        self,
        over: set[TopicPart],
        assignment: set[TopicPart],
        unit: Callable[[TopicPart], object] | None = None,
    ) -> int:
        """A full window pauses ``over``: move the tenants flooding the ready ones aside.
        Each partition's slice of the window is the share the pause itself gives it:
        the records split evenly among the sharing units (``unit``, as for
        ``FetchPort.over_share``). Split among the partitions instead (the delay
        tiers count many times over), the slice was smaller than the share, and with
        a small window no tenant of a paused partition ever held enough to flood it:
        the partition stayed paused behind the window's other jobs."""
        flooded = {tp for tp in over if tp.topic in self._sources}
        if not flooded:
            return 0
        return self._overflow.floods(flooded, window_slice(self._window_records, assignment, unit))

    def copying(self, assignment: set[TopicPart]) -> set[TopicPart]:
        """Partitions to pause while their copies are on the way."""
        return self._overflow.copying(MAX_COPIES_IN_FLIGHT, MAX_UNSAVED_COPIES) & assignment

    def poll(self, consumer: CommitsReader) -> None:
        """Read the overflow partitions' committed offsets when due; the engine clears
        the tenants whose overflow is done."""
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self._interval_s
        partitions = self._overflow.watched()
        if not partitions:
            return
        asked = [TopicPartition(self._topic, p) for p in sorted(partitions)]
        try:
            answer = consumer.committed(asked, timeout=TIMEOUT_S)
        except KafkaException as exc:
            log.debug("reading the overflow lane's committed offsets: %s", exc)
            return  # asked again next time; the tenants stay in overflow meanwhile
        # No commit yet (a negative offset) is the start of the partition.
        committed = {tp.partition: max(0, tp.offset) for tp in answer if tp.error is None}
        self._overflow.committed(committed)
