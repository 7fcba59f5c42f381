"""Class partitions whose ordered lines wait for the fetch to reach the end offset
seen at assignment, and what becomes of the jobs that wait when it cannot.

Why the wait: a job copied back from the ordering lane (a ``RETURN`` copy) lands at
the end of its class partition, behind jobs of its key enqueued after it. A new
owner (a restart, a move, a first start) may find such a copy of a previous owner
anywhere up to the partition's end, and its lane record may be gone already (the
tombstone follows the copy's fetch, not its run). Nothing but reading tells where
it is, so no line of the partition runs, and nothing of it is copied back from the
lane, before the partition is fetched up to its end offset when assigned. The copy
back waits too: a previous owner's copies back may lie there, earlier jobs of the
line or copies of the very entries in the lane (skipped as duplicates once seen,
while the entries are not on their way back); copied back before, a job would run
twice, the second time after the jobs behind it.

Why the wait can stall (finding N1): the ordered jobs fetched meanwhile wait in
their lines, unresolved, so the partition's commit stays at the first of them, and
the loop pauses a partition ``max_span`` (16,000) offsets beyond its commit. With an
end offset beyond that, the fetch never reaches it and the commit never moves: the
whole partition stops, every tenant on it. It takes a backlog of ``max_span`` or
more records beyond the first ordered job, in the class partition itself, at
assignment. Ordered jobs are never diverted by a producer's flood gate, so a
backlog of ordered jobs does it (as does one with diversion off, or spread over
producers or tenants that each stay under the gate's rate); a single tenant's
flood of unordered jobs from one producer mostly does not, as the producer writes
it to the overflow lane and the class partition keeps the first thousand or so.

The way out keeps the order: the jobs waiting in the lines of a partition that is
paused at its span while settling are held, copied to the lane and resolved, as
jobs behind a blocked head are (``KeyBook.settling_holds``). Their offsets resolve,
the commit moves, the loop fetches on, and the jobs of their keys fetched later go
to the lane behind them. Once the partition is read to its end they come back in
order (``KeyBook.returns``); a previous owner's copy of an earlier job of the key,
found on the way, runs first, as it has the lower seq. Releasing the lines instead
(or waiting only up to an offset recorded in the lane) could run a job before an
earlier job of its key whose copy back lies further on: its lane record may be
deleted already, so the lane does not know that offset.
"""

from __future__ import annotations

from collections.abc import Callable

from leasekeeper.core.leases import TopicPart

__all__ = ["SETTLING_REASON", "Settling"]

# The lane entry's reason (``inspect``) for a job held while its partition settles.
SETTLING_REASON = "waiting for its partition to be read to its end offset at assignment"


class Settling:
    """The end offset of each class partition not yet fetched that far since assigned."""

    def __init__(self) -> None:
        self._ends: dict[TopicPart, int] = {}

    def begin(self, tp: TopicPart, end_offset: int) -> None:
        self._ends[tp] = end_offset

    def forget(self, tp: TopicPart) -> None:
        self._ends.pop(tp, None)

    def settled(self, tp: TopicPart, position: Callable[[TopicPart], int]) -> bool:
        """Whether the partition was fetched up to its end offset when assigned.
        ``position``: the next offset to fetch of a partition."""
        end = self._ends.get(tp)
        if end is None:
            return True
        if position(tp) < end:
            return False
        del self._ends[tp]
        return True

    def stalled(
        self, over_span: Callable[[], set[TopicPart]], position: Callable[[TopicPart], int]
    ) -> set[TopicPart]:
        """The partitions still settling that the loop pauses at their span: their fetch
        cannot reach their end until the jobs waiting in their lines leave. Partitions
        read to their end are forgotten here (a partition without ordered jobs is
        asked about by nothing else), so ``over_span`` is asked only while some settle."""
        waiting = {tp for tp in list(self._ends) if not self.settled(tp, position)}
        return over_span() & waiting if waiting else set()
