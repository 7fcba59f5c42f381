"""The overflow lane's port, for the watch that moves flooding tenants aside
(``overflow/watch.py``) and the service that names the lane's topic."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from leasekeeper.core.leases import TopicPart
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.overflow.moves import OverflowMoves

__all__ = ["OverflowPort"]


class OverflowPort:
    def __init__(self, *, lock: threading.RLock, moves: OverflowMoves, book: PartitionBook) -> None:
        self._lock = lock
        self._moves = moves
        self._book = book

    def set_topic(self, topic: str) -> None:
        """The overflow lane's topic (its records are copies, a second one is skipped)."""
        with self._lock:
            self._moves.topic = topic

    def floods(self, over: set[TopicPart], slice_: int) -> int:
        """Move to the overflow lane the tenants flooding ``over`` (ready partitions a
        full window pauses; ``slice_`` is each one's share of the window); returns how
        many ready jobs moved."""
        with self._lock:
            return self._moves.floods(over, slice_)

    def watched(self) -> set[int]:
        """Overflow partitions whose committed offset decides whether a tenant is back."""
        with self._lock:
            return self._moves.lane.watched()

    def committed(self, committed: Mapping[int, int]) -> None:
        """The group's committed offsets in the overflow topic, read from Kafka."""
        with self._lock:
            self._moves.overflow_committed(committed)

    def copying(self, limit: int, unsaved: int) -> set[TopicPart]:
        """Partitions not to fetch further for now: those with ``limit`` copies or more
        decided and not delivered (fetching more would only queue more copies), and
        those with ``unsaved`` copies to the overflow lane in no accepted commit yet
        (what a move, after the group coordinator failed, would copy again)."""
        with self._lock:
            parts, moves = self._book.parts, self._moves
            if limit > 0 and unsaved > 0:  # only partitions with copies can qualify
                candidates = self._book.with_copies | moves.copied_parts()
            else:
                candidates = set(parts)
            return {
                tp
                for tp in candidates
                if (s := parts.get(tp)) is not None
                and (s.copies_in_flight >= limit or moves.unsaved(tp) >= unsaved)
            }
