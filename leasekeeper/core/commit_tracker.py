"""Which offset of a partition may be committed: the lowest one not yet resolved.

Commit only past contiguous resolution: a partition's committed offset is
``min(unresolved offsets)``. Jobs
finish out of order, so the tracker keeps the fetched offsets in fetch order and
advances a watermark over the resolved prefix. Offsets need not be contiguous
(transaction markers and compaction leave gaps); only fetched offsets count.
"""

from __future__ import annotations

from collections import deque


class CommitTracker:
    """Per-partition bookkeeping of fetched and resolved offsets (pure, no I/O)."""

    def __init__(self, start_offset: int) -> None:
        self._start = start_offset
        self._next = start_offset  # one past the highest fetched offset
        self._outstanding: deque[int] = deque()  # fetched, in offset order
        self._resolved_ahead: set[int] = set()  # resolved, not yet at the front
        # Offsets resolved so far (ever): what a commit's snapshot of it makes durable.
        self.resolutions = 0

    @property
    def highest_fetched(self) -> int:
        """The highest offset fetched so far, or ``start - 1`` when none."""
        return self._next - 1

    def fetched(self, offset: int) -> None:
        """Record a fetched offset; offsets arrive in increasing order."""
        if offset < self._next:
            if offset >= self._start:
                return  # a re-fetch after pause/resume: already tracked
            raise ValueError(f"offset {offset} is below the start offset {self._start}")
        self._outstanding.append(offset)
        self._next = offset + 1

    def resolve(self, offset: int) -> None:
        """Mark a fetched offset done (acked, retried, dead-lettered or skipped)."""
        if offset >= self._next:
            raise ValueError(f"offset {offset} was never fetched (next is {self._next})")
        if not self._outstanding or offset < self._outstanding[0]:
            return  # already behind the watermark
        if offset in self._resolved_ahead:
            return
        self.resolutions += 1
        self._resolved_ahead.add(offset)
        while self._outstanding and self._outstanding[0] in self._resolved_ahead:
            self._resolved_ahead.discard(self._outstanding.popleft())

    def is_resolved(self, offset: int) -> bool:
        if offset >= self._next:
            return False
        if not self._outstanding or offset < self._outstanding[0]:
            return True
        return offset in self._resolved_ahead

    @property
    def committable(self) -> int:
        """The offset to commit: the lowest unresolved fetched offset, else one past the last."""
        if self._outstanding:
            return self._outstanding[0]
        return self._next

    def unresolved(self, limit: int = 20) -> list[int]:
        """The first ``limit`` unresolved offsets: what holds the commit back."""
        result = []
        for offset in self._outstanding:
            if offset not in self._resolved_ahead:
                result.append(offset)
                if len(result) >= limit:
                    break
        return result

    def resolved_beyond(self) -> set[int]:
        """Offsets resolved beyond the committable one (what a commit cannot say)."""
        return set(self._resolved_ahead)

    def unresolved_count(self) -> int:
        return len(self._outstanding) - len(self._resolved_ahead)
