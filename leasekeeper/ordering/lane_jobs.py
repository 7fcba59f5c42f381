"""The jobs of the owned lines that are out in the ordering lane (see ``keys``).

Apart from the jobs here because they move for other reasons: a job here waits for
its line's head, as the fetch brought it; a job out waits on a head's retry, a
breaker, a dead letter or an operator, and each of its moves is a copy through
Kafka whose outcome comes back later (durable, too large, given up). ``KeyBook``
holds one ``LaneJobs`` over its own lines and calls it under the same lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.ordering.line import Line
from leasekeeper.ordering.settling import SETTLING_REASON, Settling
from leasekeeper.ordering.values import (
    BlockedLine,
    LaneEntry,
    LaneState,
    LineId,
    OnDead,
    line_of,
    seq_of,
)
from schemas.job import Job

__all__ = ["RETURN_BATCH", "LaneJobs"]

# Held jobs copied back into the class topic at once when their line unblocks: one
# round trip through Kafka brings back this many, in order.
RETURN_BATCH = 32


class LaneJobs:
    """The jobs of a ``KeyBook``'s lines that are out in the lane, and their copies."""

    def __init__(
        self,
        *,
        lines: dict[LineId, Line],
        dirty: set[LineId],
        settling: Settling,
        make: Callable[[LineId], Line],
        forget: Callable[[LineId], None],
        on_dead: OnDead,
        full: Callable[[Pending], Job],
        keep_jobs: bool,
    ) -> None:
        """``lines``, ``dirty`` (lines whose next job may be released) and ``settling``
        are the book's own, shared; ``make`` opens a line and ``forget`` drops one left
        empty, as the book does. ``on_dead``, ``full`` and ``keep_jobs``: see ``KeyBook``."""
        self.on_dead = on_dead
        self._lines = lines
        self._dirty = dirty
        self._settling = settling
        self._make = make
        self._forget = forget
        self._full = full
        self._keep_jobs = keep_jobs
        self._out_lines: set[LineId] = set()  # lines that may have jobs in the lane

    # -- jobs here held in the lane -------------------------------------------------

    def hold(self, line: Line, pending: Pending, seq: int, reason: str) -> LaneEntry:
        """A job here goes out, held behind its line's head: the entry to copy."""
        line_id = line_of(pending)
        assert line_id is not None
        job = replace(self._full(pending), ordering_seq=seq)
        entry = LaneEntry(line=line_id, seq=seq, job=job, state=LaneState.HELD, reason=reason)
        line.out[seq] = entry
        line.sending[seq] = (pending, False)
        self._out_lines.add(line_id)
        return entry

    def settling_holds(
        self, over_span: Callable[[], set[TopicPart]], position: Callable[[TopicPart], int]
    ) -> list[tuple[Pending, LaneEntry]]:
        """Jobs waiting here in the lines of a partition paused at its span before it is
        read to its end when assigned: to copy to the lane, so that its commit moves and
        the fetch can reach that end (see ``ordering_settling``)."""
        stalled = self._settling.stalled(over_span, position)
        held: list[tuple[Pending, LaneEntry]] = []
        for line_id, line in self._lines.items() if stalled else ():
            if line_id.tp in stalled:
                for seq in sorted(s for s in line.members if line.may_leave(s)):
                    pending = line.members.pop(seq)
                    held.append((pending, self.hold(line, pending, seq, SETTLING_REASON)))
        return held

    def holds(self, now_ms: int) -> list[tuple[Pending, LaneEntry]]:
        """Jobs here behind a head that is out and not due: to copy to the lane.

        A job just back from the lane whose old lane record's tombstone is not durable
        yet (``returning``) stays here until it is: held now, its new lane record would
        be deleted from the line by that tombstone's delivery (and could be deleted
        from the lane by the tombstone itself), and the job would be lost. It is held
        on a later turn, its new record written after the tombstone."""
        held: list[tuple[Pending, LaneEntry]] = []
        for _line_id, line in self._with_out():
            head = line.head_out()
            if head is None or not head.blocks(now_ms) or not line.members:
                continue
            behind = (s for s in line.members if s > head.seq and line.may_leave(s))
            for seq in sorted(behind):
                pending = line.members.pop(seq)
                held.append((pending, self.hold(line, pending, seq, f"behind {head.seq}")))
        return held

    def _with_out(self) -> list[tuple[LineId, Line]]:
        """The lines with jobs in the lane (the others need no hold nor return): kept
        in ``_out_lines`` as entries go out, pruned here."""
        lines = []
        for line_id in list(self._out_lines):
            line = self._lines.get(line_id)
            if line is None or not line.out:
                self._out_lines.discard(line_id)
            else:
                lines.append((line_id, line))
        return lines

    # -- the head out ---------------------------------------------------------------

    def failed(self, pending: Pending, job: Job, due_ms: int, reason: str) -> LaneEntry:
        """The head failed and will retry: it waits in the lane, blocking its line."""
        return self._out(pending, replace(job, run_at_ms=due_ms), LaneState.RETRYING,
                         due_ms, reason)  # fmt: skip

    def parked(self, pending: Pending, job: Job, due_ms: int, reason: str) -> LaneEntry:
        """The head may not run before ``due_ms`` (its type's breaker, a rate limit)."""
        return self._out(pending, job, LaneState.HELD, due_ms, reason)

    def died(self, pending: Pending, job: Job, reason: str) -> LaneEntry | None:
        """The head is being dead-lettered: with ``--on-dead block`` it blocks its line
        from the lane (the entry to copy, before the dead letter), else the line goes on
        once the dead letter is durable (``finished`` then: a crash before would run the
        job again, and it must not run after the jobs behind it)."""
        if self.on_dead is OnDead.CONTINUE:
            return None
        return self._out(pending, job, LaneState.DEAD, 0, reason)

    def _out(
        self, pending: Pending, job: Job, state: LaneState, due_ms: int, reason: str
    ) -> LaneEntry:
        line_id = line_of(pending)
        assert line_id is not None
        line = self._make(line_id)
        seq = seq_of(pending)
        entry = LaneEntry(line=line_id, seq=seq, job=replace(job, ordering_seq=seq),
                          state=state, due_ms=due_ms, reason=reason)  # fmt: skip
        line.out[seq] = entry
        self._out_lines.add(line_id)
        line.returning.discard(seq)
        running = line.current if line.is_current(seq) else None
        line.sending[seq] = (running or pending, True)
        if running is not None:
            line.current = None
        line.members.pop(seq, None)
        self._dirty.add(line_id)
        return entry

    # -- the copies' outcomes -------------------------------------------------------

    def sent(self, entry: LaneEntry) -> None:
        """The entry's lane copy is durable: from now on the lane has the job."""
        line = self._lines.get(entry.line)
        if line is not None:
            line.sending.pop(entry.seq, None)
            if line.out.get(entry.seq) is entry:
                line.out[entry.seq] = self._kept(entry)

    def _kept(self, entry: LaneEntry) -> LaneEntry:
        """What is kept here of a lane entry whose record is durable."""
        return entry if self._keep_jobs else entry.without_job()

    def stays(self, entry: LaneEntry) -> Pending | None:
        """The entry's lane copy did not fit the lane (nothing was written): the job
        stays here, unresolved. A job held behind its line's head becomes a member that
        is never held again; the line's running job (retrying, parked or dead) is its
        running job again, returned for the gate to run again in place."""
        line = self._lines.get(entry.line)
        sent = line.sending.pop(entry.seq, None) if line is not None else None
        if line is None or sent is None:
            return None
        pending, head = sent
        line.out.pop(entry.seq, None)
        line.returning.discard(entry.seq)
        self._dirty.add(entry.line)
        if head:
            line.current = pending
            return pending
        line.members[entry.seq] = pending
        line.staying.add(entry.seq)
        return None

    # -- back into the class topic --------------------------------------------------

    def returns(self, now_ms: int, position: Callable[[TopicPart], int]) -> list[LaneEntry]:
        """Lane entries whose turn came, to copy back into their class topic (in order):
        the head when nothing of its line is here and it is due, and the held jobs
        right behind it, up to ``RETURN_BATCH``. ``position``: the next offset to fetch
        of a partition. Not before the partition is read to its end offset when
        assigned, as ``KeyBook.release`` (see ``ordering_settling``)."""
        back: list[LaneEntry] = []
        for line_id, line in self._with_out():
            if line.current is not None or line.returning or not line.out:
                continue
            if not self._settling.settled(line_id.tp, position):
                continue
            head = line.head_out()
            if head is None or head.blocks(now_ms):
                continue
            low_here = min(line.members, default=None)
            for seq in sorted(line.out)[:RETURN_BATCH]:
                entry = line.out[seq]
                if (low_here is not None and seq > low_here) or entry.blocks(now_ms):
                    break
                line.returning.add(seq)
                back.append(entry)
        return back

    def returned(self, entry: LaneEntry) -> None:
        """The copy is in the class topic and the lane record deleted: it runs from there."""
        line = self._lines.get(entry.line)
        if line is None or entry.seq not in line.returning:
            return
        line.returning.discard(entry.seq)
        line.out.pop(entry.seq, None)
        self._dirty.add(entry.line)
        # Empty when the copy has not been fetched yet: it makes its line anew then, and
        # a line whose copy is skipped unfetched (cancelled) must not stay forever.
        self._forget(entry.line)

    def return_dropped(self, entry: LaneEntry) -> None:
        """A copy back was given up (the partition moved): it is still in the lane."""
        line = self._lines.get(entry.line)
        if line is not None:
            line.returning.discard(entry.seq)

    # -- the lane as read from Kafka ------------------------------------------------

    def assigned(self, tp: TopicPart, entries: Iterable[LaneEntry]) -> None:
        """The lane entries of a partition just assigned, as the lane holds them."""
        for entry in entries:
            if entry.line.tp == tp:
                self._make(entry.line).out[entry.seq] = self._kept(entry)
                self._out_lines.add(entry.line)

    def operator_at(self, tp: TopicPart, seq: int, entry: LaneEntry | None) -> None:
        """``operator`` for a lane record known by its partition and seq."""
        for line_id, line in list(self._lines.items()):
            if line_id.tp == tp and seq in line.out:
                self.operator(entry, line_id, seq)
                return

    def operator(self, entry: LaneEntry | None, line_id: LineId, seq: int) -> None:
        """An operator replayed (``entry``: due now) or skipped (None) a dead head."""
        line = self._lines.get(line_id)
        if line is None or seq not in line.out or seq in line.returning:
            return
        if entry is None:
            del line.out[seq]
        else:
            line.out[seq] = self._kept(entry)
            self._out_lines.add(line_id)
        self._dirty.add(line_id)
        self._forget(line_id)

    # -- views ----------------------------------------------------------------------

    def blocked(self) -> list[BlockedLine]:
        views = []
        for line_id, line in self._lines.items():
            head = line.head_out()
            if head is None:
                continue
            views.append(BlockedLine(line=line_id, head_seq=head.seq, job_id=head.job_id,
                                     state=head.state, due_ms=head.due_ms, reason=head.reason,
                                     held=len(line.out) - 1))  # fmt: skip
        return sorted(views, key=lambda v: (v.line.topic, v.line.partition, v.line.key))
