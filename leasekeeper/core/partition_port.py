"""The rebalancer's port: partitions assigned to this leasekeeper and taken away.

The partition book keeps what the core knows of each partition; features with
state per partition hear of it through ``PartitionHook`` (``core/hooks.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from leasekeeper.core.hooks import PartitionHook
from leasekeeper.core.lease_core import LeaseCore
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.window import ReadyWindow

__all__ = ["PartitionPort"]


class PartitionPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        book: PartitionBook,
        window: ReadyWindow,
        core: LeaseCore,
        hooks: Sequence[PartitionHook],
    ) -> None:
        self._lock = lock
        self._book = book
        self._window = window
        self._core = core
        self._hooks = tuple(hooks)

    def assign(self, tp: TopicPart, committed: int, metadata: str | None = None) -> None:
        """Take a partition from ``committed`` on, remembering what the store knows and
        what the previous owner left in the commit metadata (whichever knows more)."""
        known = self._book.recall(tp, committed, metadata)  # reads the store: unlocked
        with self._lock:
            self._book.assign(tp, committed, metadata, known)
            for hook in self._hooks:
                hook.assigned(tp, metadata)

    def assignment_received(self) -> None:
        """The consumer applied the group's first assignment in full (possibly empty)."""
        with self._lock:
            self._core.lookup.settle_in.assignment_received()

    def settling_in(self) -> bool:
        """True while leases not known yet are answered "retry later" (see SettleIn)."""
        with self._lock:
            return self._core.lookup.settling()

    def begin_revoke(self, tps: set[TopicPart]) -> None:
        """Stop dispatching from partitions about to move; their leases may still settle."""
        with self._lock:
            self._book.begin_revoke(tps)
            self._window.drop(lambda p: p.tp in tps)

    def revoke(self, tp: TopicPart) -> None:
        """Forget a partition: its ready jobs leave the window, its leases become unknown."""
        with self._lock:
            held = self._book.revoke(tp) is not None
            if held:
                self._window.drop(lambda p: p.tp == tp)
            for hook in self._hooks:
                hook.revoked(tp, held=held)

    def assigned(self) -> list[TopicPart]:
        """The partitions held here (a fatal consumer error lets go of them all)."""
        with self._lock:
            return list(self._book.parts)

    def in_flight(self, tps: set[TopicPart] | None = None) -> int:
        """Leases and copies not yet settled in ``tps`` (all partitions by default). Every
        copy counts from the moment it is decided until the outbox delivered or dropped
        it: retries, dead letters, hops, raw dead letters and dedupe claims alike."""
        with self._lock:
            return self._book.in_flight(tps)
