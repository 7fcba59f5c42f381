"""The committer's port: commit positions past contiguous resolutions, and what Kafka
accepted.

Finished jobs in no accepted commit yet hold leasing back once they reach
``max_uncommitted`` (``behind``): a group coordinator that is down must not let
a crash re-run an unbounded number of them. Copies a feature made that are no
finished jobs (the overflow lane's) do not count (``CommitHook.unsaved``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from leasekeeper.core.claimer import Claimers
from leasekeeper.core.hooks import CommitHook
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.partition_book import PartitionBook

__all__ = ["CommitPort"]

log = logging.getLogger(__name__)


class CommitPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        book: PartitionBook,
        claimers: Claimers,
        hooks: Sequence[CommitHook],
        max_uncommitted: int,
    ) -> None:
        self._lock = lock
        self._book = book
        self._claimers = claimers
        self._hooks = tuple(hooks)
        self._max_uncommitted = max_uncommitted
        self._holding = False  # leasing held back until a commit lands

    def commit_positions(
        self, only: set[TopicPart] | None = None
    ) -> dict[TopicPart, tuple[int, str]]:
        """Partitions whose commit (offset, or progress beyond it) changed since the last."""
        with self._lock:
            for hook in self._hooks:
                hook.refresh()
            positions = self._book.commit_positions(only)
            for hook in self._hooks:
                hook.sent(positions, only)
            return positions

    def shrink_metadata(self, tp: TopicPart) -> tuple[int, str] | None:
        """The broker refused ``tp``'s commit metadata as too large: the position to
        commit instead, with at most half as much metadata (none at the end). A move
        then re-runs more of the jobs finished beyond the commit, but the commit moves."""
        with self._lock:
            return self._book.shrink_metadata(tp)

    def over_span(self, reading_on: set[TopicPart] | None = None, cap: int = 0) -> set[TopicPart]:
        """Partitions fetched so far beyond their commit that metadata could not describe.
        Those of ``reading_on`` (a deferred flood is read past) are not, while their last
        commit described every resolution beyond it and they are under ``cap`` offsets
        beyond it."""
        with self._lock:
            over = self._book.over_span()
            if reading_on:
                over -= {tp for tp in over & reading_on if self._book.may_read_on(tp, cap)}
            return over

    def committed(self, positions: Mapping[TopicPart, tuple[int, str]]) -> None:
        """Kafka accepted these commits: the store can forget everything below them."""
        with self._lock:
            self._book.committed(positions)
            for hook in self._hooks:
                hook.accepted(positions)
            if self._holding:
                self._claimers.wake_all()

    def commit_soon(self) -> bool:
        """Whether half as many finished jobs as hold leasing back wait for a commit:
        the loop commits now instead of at its interval, so a fast drain is not held
        (its claims answered with nothing) while a commit that would land is due."""
        with self._lock:
            return self._unsaved() >= self._max_uncommitted // 2

    def behind(self) -> bool:
        """Whether too many finished jobs wait for a commit Kafka accepts: hand out no
        more until one lands (``committed`` wakes the claimers). Under the lock."""
        behind = self._unsaved() >= self._max_uncommitted
        if behind != self._holding:
            self._holding = behind
            if behind:
                log.warning(
                    "%d finished jobs are in no accepted commit yet (is the group "
                    "coordinator down?); no new leases until Kafka takes a commit",
                    self._book.unsaved(),
                )
            else:
                log.info("commits land again; leasing resumes")
        return behind

    def _unsaved(self) -> int:
        unsaved = self._book.unsaved()
        for hook in self._hooks:
            unsaved -= hook.unsaved()
        return unsaved
