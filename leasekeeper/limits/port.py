"""The rate limits' port, for the loop (the excess over a limit parked on its turn),
the service (the queue's partitions, which each limit is shared over) and the views."""

from __future__ import annotations

import threading
from collections.abc import Callable

from leasekeeper.core.clocks import now_ms
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.limits.admission import LimitDispatch, LimitsSnapshot

__all__ = ["LimitsPort"]


class LimitsPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        dispatch: LimitDispatch,
        copies: CopyQueue,
        clock: Callable[[], float],
    ) -> None:
        self._lock = lock
        self._dispatch = dispatch
        self._copies = copies
        self._clock = clock

    def park_excess(self) -> int:
        """Park in a delay tier the ready jobs of a rate-limited type or tenant beyond
        its share of the window (see ``LimitDispatch``); returns how many."""
        if not self._dispatch.active:
            return 0
        with self._lock:
            actions = self._dispatch.park_excess(now_ms(self._clock))
            self._copies.add(actions)
        return len(actions)

    def queue_partitions(self, topics: frozenset[str], partitions: int) -> None:
        """The topics the queue's leasekeepers consume and their partitions: each type's
        rate limit applies here in the share of them this leasekeeper owns."""
        with self._lock:
            self._dispatch.queue_partitions(topics, partitions)

    def snapshot(self) -> LimitsSnapshot | None:
        """Each rate limiter (rate, tokens, waiting) for ``inspect`` and metrics."""
        with self._lock:
            return self._dispatch.snapshot()
