"""One ordering key's line, and what can be read off it alone.

Apart from ``KeyBook`` because both halves of the book read the same line: the jobs
here that wait their turn (``keys``) and the jobs out in the ordering lane
(``lane_jobs``). Nothing here changes a line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from leasekeeper.core.leases import Pending
from leasekeeper.ordering.values import LaneEntry, LaneState, seq_of

__all__ = ["Line"]


@dataclass(kw_only=True)
class Line:
    members: dict[int, Pending] = field(default_factory=dict)  # here, by seq
    current: Pending | None = None  # released to the window, leased or settling
    out: dict[int, LaneEntry] = field(default_factory=dict)  # in the lane, by seq
    returning: set[int] = field(default_factory=set)  # copied back, tombstone not durable
    claiming: set[int] = field(default_factory=set)  # members whose dedupe claim is not durable
    staying: set[int] = field(default_factory=set)  # members whose lane copy did not fit
    # Lane copies not durable yet: the job, and whether it was the line's running job.
    sending: dict[int, tuple[Pending, bool]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not self.members and self.current is None and not self.out

    def is_current(self, seq: int) -> bool:
        """Whether the job at ``seq`` is the line's running job."""
        return self.current is not None and seq_of(self.current) == seq

    def head_out(self) -> LaneEntry | None:
        """The line's head when it is out, else None."""
        if not self.out:
            return None
        low = min(self.out)
        here = [*self.members, *([seq_of(self.current)] if self.current else [])]
        return self.out[low] if not here or low < min(here) else None

    def behind_out(self, seq: int, now_ms: int) -> bool:
        """Jobs ahead of ``seq`` are out and not on their way back: it waits with them."""
        return any(s < seq and (e.state is LaneState.HELD or e.blocks(now_ms))
                   for s, e in self.out.items() if s not in self.returning)  # fmt: skip

    def duplicate(self, pending: Pending, seq: int) -> bool:
        """Its seq is in the lane (and not on its way back), or here at another offset:
        another copy of the same job (a hold or return delivered before a crash)."""
        if seq in self.out and seq not in self.returning:
            return True
        known = self.members.get(seq) or (self.current if self.is_current(seq) else None)
        return known is not None and known.offset != pending.offset

    def may_leave(self, seq: int) -> bool:
        """Whether a job here may be held in the lane: not one just back whose tombstone
        is not durable (``KeyBook.holds``), nor one waiting for its dedupe claim, nor one
        whose lane copy did not fit (it stays here, holding its partition's commit)."""
        return seq not in self.returning and seq not in self.claiming and seq not in self.staying
