"""The ordered lines' port, for the lane's reader (``ordering/lane_loads.py``), the
operator's replay and skip, and the views."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from leasekeeper.core.leases import TopicPart
from leasekeeper.ordering.gate import OrderingGate
from leasekeeper.ordering.values import BlockedLine, LaneEntry

__all__ = ["OrderingPort"]


class OrderingPort:
    def __init__(self, *, lock: threading.RLock, gate: OrderingGate) -> None:
        self._lock = lock
        self._gate = gate

    def assign_lines(self, tp: TopicPart, end_offset: int, lane: Iterable[LaneEntry]) -> None:
        """A class partition assigned: what of its lines is in the ordering lane, and its
        end offset now (its lines run once it is fetched that far; see ``KeyBook``)."""
        with self._lock:
            self._gate.keys.assign(tp, end_offset, lane)

    def lane_operator(self, tp: TopicPart, seq: int, entry: LaneEntry | None) -> None:
        """An operator replayed (``entry``) or skipped (None) a dead head in the lane."""
        with self._lock:
            self._gate.keys.operator_at(tp, seq, entry)
            self._gate.release()

    def blocked_keys(self) -> list[BlockedLine]:
        with self._lock:
            return self._gate.blocked()
