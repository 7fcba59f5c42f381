"""Per-key ordering: at most one job of an ordering key runs at a time, in enqueue order.

A key is scoped to its queue and tenant, so all its jobs land in one partition
of one class topic: a *line* (``LineId``). The partition's offsets are the
line's order: a job's place (``seq``) is the offset it had there, carried in the
envelope (``ordering_seq``) once the job leaves the topic, so it keeps its place
when it comes back.

A line's jobs are in one of two places:

- *here*: fetched from the class partition and not resolved yet. They wait in the
  line (``members``), not in the window, so the window never holds a job that
  may not run; only the line's head is released to the window (``current``).
- *out*: in the ordering lane (``jobs.Q.ordering``, compacted, one record per
  job, keyed ``topic|partition|seq``): held behind a blocked head, or the head
  itself retrying (its backoff in ``due_ms``), or dead with ``--on-dead block``.

The head of a line is its lowest seq, here or out. It runs when it is here and
nothing of the line runs. When it is out and due, it is copied back into the
class topic (``returns``; the copy keeps its seq), the lane record is deleted
(a tombstone) and only then may the copy run. When the head is out and not due
(a retry backing off, or dead and blocking), the jobs behind it that are here
are held: copied to the lane and resolved (copy-then-resolve, as a retry), so
they do not hold the partition's commit.

The lane is the durable state of ordering: every job of a line that is not in
the class partition beyond its commit is in the lane (see docs/ordering.md).

This class is pure (no Kafka, no clock of its own): the engine calls it under
its lock and carries out the copies it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.ordering.settling import SETTLING_REASON, Settling
from leasekeeper.ordering.values import (
    BlockedLine,
    LaneEntry,
    LaneState,
    LineId,
    OnDead,
    Verdict,
    line_of,
    seq_of,
)
from schemas.job import Job

__all__ = [
    "RETURN_BATCH",
    "BlockedLine",
    "KeyBook",
    "LaneEntry",
    "LaneState",
    "LineId",
    "OnDead",
    "Verdict",
    "line_of",
    "seq_of",
]

# Held jobs copied back into the class topic at once when their line unblocks: one
# round trip through Kafka brings back this many, in order.
RETURN_BATCH = 32


def _decoded(pending: Pending) -> Job:
    """The job of a pending job offered decoded (``JobHead.of``)."""
    full = pending.job.full
    if full is None:
        raise ValueError(f"job {pending.job.job_id} was offered by its headers only")
    return full


@dataclass(kw_only=True)
class _Line:
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

    def head_out(self) -> LaneEntry | None:
        """The line's head when it is out, else None."""
        if not self.out:
            return None
        low = min(self.out)
        here = [*self.members, *([seq_of(self.current)] if self.current else [])]
        return self.out[low] if not here or low < min(here) else None


class KeyBook:
    """The lines of the partitions this leasekeeper owns (under the engine's lock)."""

    def __init__(
        self,
        *,
        on_dead: OnDead = OnDead.CONTINUE,
        full: Callable[[Pending], Job] = _decoded,
        keep_jobs: bool = True,
    ) -> None:
        """``full``: a pending job's whole envelope (the lane keeps whole jobs).
        ``keep_jobs=False``: an entry whose lane record is durable (or read from the
        lane) keeps the job's place and id only, so a line blocked behind its head holds
        no payloads here however long it grows; its job is read back from the lane when
        it goes home (``LaneFeed.job_of``, on the copy's way out)."""
        self.on_dead = on_dead
        self._full = full
        self._keep_jobs = keep_jobs
        self._lines: dict[LineId, _Line] = {}
        self._class_of: dict[tuple[str, str], str] = {}  # (tenant, key) -> class topic
        self._dirty: set[LineId] = set()
        self._settling = Settling()  # partitions not yet read to their end when assigned
        self._out_lines: set[LineId] = set()  # lines that may have jobs in the lane

    # -- jobs fetched from a class partition ------------------------------------

    def offer(
        self, pending: Pending, now_ms: int, *, claiming: bool = False
    ) -> tuple[Verdict, LaneEntry | None]:
        """Where an ordered job just fetched goes. HOLD comes with the lane entry to copy.
        ``claiming``: its dedupe claim is on its way; it takes its place in the line at
        once (a later job of its key must not pass it) but is neither released nor held
        before ``claimed``."""
        line_id = line_of(pending)
        assert line_id is not None
        if self._conflicts(line_id):
            return Verdict.CONFLICT, None
        line = self._line(line_id)
        seq = seq_of(pending)
        if self._duplicate(line, pending, seq):
            self._forget_if_empty(line_id)
            return Verdict.DUPLICATE, None
        if seq in line.returning and seq not in line.members:
            # Back in the partition: its lane record may go, and once that is durable
            # it may run (not before: a crash would bring it back from the lane again).
            line.members[seq] = pending
            if claiming:
                line.claiming.add(seq)
            return Verdict.RETURNED, line.out[seq]
        if claiming:
            line.members[seq] = pending
            line.claiming.add(seq)
            return Verdict.QUEUED, None
        if self._behind_out(line, seq, now_ms):
            entry = self._hold_entry(line, pending, seq, "behind a blocked head")
            return Verdict.HOLD, entry
        line.members[seq] = pending
        self._dirty.add(line_id)
        return Verdict.QUEUED, None

    def claimed(self, pending: Pending, now_ms: int) -> LaneEntry | None:
        """Its dedupe claim is durable: it may run in its turn, or, when jobs ahead of it
        wait out in the lane, it is held with them (the entry to copy)."""
        line_id = line_of(pending)
        line = self._lines.get(line_id) if line_id is not None else None
        seq = seq_of(pending)
        if line is None or line_id is None or line.members.get(seq) is not pending:
            return None
        line.claiming.discard(seq)
        self._dirty.add(line_id)
        if seq in line.returning or not self._behind_out(line, seq, now_ms):
            return None
        del line.members[seq]
        return self._hold_entry(line, pending, seq, "behind a blocked head")

    @staticmethod
    def _behind_out(line: _Line, seq: int, now_ms: int) -> bool:
        """Jobs ahead of ``seq`` are out and not on their way back: it waits with them."""
        return any(s < seq and (e.state is LaneState.HELD or e.blocks(now_ms))
                   for s, e in line.out.items() if s not in line.returning)  # fmt: skip

    @staticmethod
    def _duplicate(line: _Line, pending: Pending, seq: int) -> bool:
        """Its seq is in the lane (and not on its way back), or here at another offset:
        another copy of the same job (a hold or return delivered before a crash)."""
        if seq in line.out and seq not in line.returning:
            return True
        known = line.members.get(seq) or (line.current if _is(line.current, seq) else None)
        return known is not None and known.offset != pending.offset

    def skipped_arrival(self, pending: Pending) -> LaneEntry | None:
        """An ordered job fetched and skipped at once (cancelled, or a dedupe duplicate):
        if it was on its way back from the lane, its lane record must go (the entry to
        delete), so that its line goes on without it."""
        line_id = line_of(pending)
        line = self._lines.get(line_id) if line_id is not None else None
        seq = seq_of(pending)
        if line is None or seq not in line.returning:
            return None
        return line.out[seq]

    def restored(self, pending: Pending) -> None:
        """A job leased before a restart, its lease taken back over: it is its line's
        running job."""
        line_id = line_of(pending)
        if line_id is not None:
            self._line(line_id).current = pending

    def _conflicts(self, line_id: LineId) -> bool:
        scope = (line_id.tenant, line_id.key)
        known = self._class_of.setdefault(scope, line_id.topic)
        return known != line_id.topic

    def _line(self, line_id: LineId) -> _Line:
        line = self._lines.get(line_id)
        if line is None:
            line = self._lines[line_id] = _Line()
            self._class_of[(line_id.tenant, line_id.key)] = line_id.topic
        return line

    def _hold_entry(self, line: _Line, pending: Pending, seq: int, reason: str) -> LaneEntry:
        line_id = line_of(pending)
        assert line_id is not None
        job = replace(self._full(pending), ordering_seq=seq)
        entry = LaneEntry(line=line_id, seq=seq, job=job, state=LaneState.HELD, reason=reason)
        line.out[seq] = entry
        line.sending[seq] = (pending, False)
        self._out_lines.add(line_id)
        return entry

    # -- the head's turn ----------------------------------------------------------

    def release(self, position: Callable[[TopicPart], int]) -> list[Pending]:
        """Jobs that became their line's head and may enter the window now.
        ``position``: the next offset to fetch of a partition."""
        ready = []
        for line_id in list(self._dirty):
            line = self._lines.get(line_id)
            if line is None or line.current is not None or not line.members:
                self._dirty.discard(line_id)
                continue
            if not self._settling.settled(line_id.tp, position):
                continue  # a job copied back may still be ahead in the partition
            self._dirty.discard(line_id)
            seq = min(line.members)
            if any(s <= seq for s in line.out) or seq in line.claiming:
                continue  # an earlier job is out (maybe on its way back), or no claim yet
            line.current = line.members.pop(seq)
            ready.append(line.current)
        return ready

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
                for seq in sorted(s for s in line.members if self._may_leave(line, s)):
                    pending = line.members.pop(seq)
                    held.append((pending, self._hold_entry(line, pending, seq, SETTLING_REASON)))
        return held

    def holds(self, now_ms: int) -> list[tuple[Pending, LaneEntry]]:
        """Jobs here behind a head that is out and not due: to copy to the lane.

        A job just back from the lane whose old lane record's tombstone is not durable
        yet (``returning``) stays here until it is: held now, its new lane record would
        be deleted from the line by that tombstone's delivery (and could be deleted
        from the lane by the tombstone itself), and the job would be lost. It is held
        on a later turn, its new record written after the tombstone."""
        held: list[tuple[Pending, LaneEntry]] = []
        for line in self._with_out():
            head = line.head_out()
            if head is None or not head.blocks(now_ms) or not line.members:
                continue
            behind = (s for s in line.members if s > head.seq and self._may_leave(line, s))
            for seq in sorted(behind):
                pending = line.members.pop(seq)
                held.append((pending, self._hold_entry(line, pending, seq, f"behind {head.seq}")))
        return held

    @staticmethod
    def _may_leave(line: _Line, seq: int) -> bool:
        """Whether a job here may be held in the lane: not one just back whose tombstone
        is not durable (above), nor one waiting for its dedupe claim, nor one whose lane
        copy did not fit (it stays here, holding its partition's commit)."""
        return seq not in line.returning and seq not in line.claiming and seq not in line.staying

    def _with_out(self) -> list[_Line]:
        return [line for _line_id, line in self._with_out_ids()]

    def _with_out_ids(self) -> list[tuple[LineId, _Line]]:
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

    def finished(self, pending: Pending) -> None:
        """The line's running job ended here (acked, skipped, or its copy is decided):
        the next may go."""
        line_id = line_of(pending)
        line = self._lines.get(line_id) if line_id is not None else None
        if line is None or line_id is None:
            return
        seq = seq_of(pending)
        if _is(line.current, seq):
            line.current = None
        line.members.pop(seq, None)
        line.claiming.discard(seq)
        line.staying.discard(seq)
        self._dirty.add(line_id)
        self._forget_if_empty(line_id)

    def running(self, pending: Pending) -> bool:
        """Whether ``pending`` is its line's running job here (released to the window,
        leased, or settling)."""
        line_id = line_of(pending)
        line = self._lines.get(line_id) if line_id is not None else None
        return line is not None and _is(line.current, seq_of(pending))

    def class_of(self, line_id: LineId) -> str:
        """The class topic the line's key is known in here."""
        return self._class_of.get((line_id.tenant, line_id.key), line_id.topic)

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

    def sweep(self, gone: Callable[[Pending], bool]) -> None:
        """Lines whose running job ended by any other way (cancelled, parked by a breaker,
        dead-lettered as unhandled, its partition moved): ``gone`` says so."""
        for line_id, line in list(self._lines.items()):
            if line.current is not None and gone(line.current):
                line.current = None
                self._dirty.add(line_id)
                self._forget_if_empty(line_id)

    # -- copies of the line's jobs ----------------------------------------------

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
        line = self._line(line_id)
        seq = seq_of(pending)
        entry = LaneEntry(line=line_id, seq=seq, job=replace(job, ordering_seq=seq),
                          state=state, due_ms=due_ms, reason=reason)  # fmt: skip
        line.out[seq] = entry
        self._out_lines.add(line_id)
        line.returning.discard(seq)
        running = line.current if _is(line.current, seq) else None
        line.sending[seq] = (running or pending, True)
        if running is not None:
            line.current = None
        line.members.pop(seq, None)
        self._dirty.add(line_id)
        return entry

    def returns(self, now_ms: int, position: Callable[[TopicPart], int]) -> list[LaneEntry]:
        """Lane entries whose turn came, to copy back into their class topic (in order):
        the head when nothing of its line is here and it is due, and the held jobs
        right behind it, up to ``RETURN_BATCH``. ``position``: the next offset to fetch
        of a partition. Not before the partition is read to its end offset when
        assigned, as ``release`` (see ``ordering_settling``)."""
        back: list[LaneEntry] = []
        for line_id, line in self._with_out_ids():
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
        self._forget_if_empty(entry.line)

    def return_dropped(self, entry: LaneEntry) -> None:
        """A copy back was given up (the partition moved): it is still in the lane."""
        line = self._lines.get(entry.line)
        if line is not None:
            line.returning.discard(entry.seq)

    # -- the lane as read from Kafka ---------------------------------------------

    def assign(self, tp: TopicPart, end_offset: int, entries: Iterable[LaneEntry]) -> None:
        """A partition assigned, with its lines' lane entries as the lane holds them
        (read to its end). No line of it runs before the partition is fetched up to
        ``end_offset``, its end when assigned (see ``ordering_settling``)."""
        self._settling.begin(tp, end_offset)
        for entry in entries:
            if entry.line.tp == tp:
                self._line(entry.line).out[entry.seq] = self._kept(entry)
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
        self._forget_if_empty(line_id)

    def revoke(self, tp: TopicPart) -> None:
        """A partition moved away: its lines go with it (the lane keeps what is out)."""
        self._settling.forget(tp)
        for line_id in [line_id for line_id in self._lines if line_id.tp == tp]:
            del self._lines[line_id]
            self._dirty.discard(line_id)
            self._class_of.pop((line_id.tenant, line_id.key), None)

    def _forget_if_empty(self, line_id: LineId) -> None:
        line = self._lines.get(line_id)
        if line is not None and line.empty():
            del self._lines[line_id]
            self._dirty.discard(line_id)
            self._class_of.pop((line_id.tenant, line_id.key), None)

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

    def waiting(self) -> int:
        """Jobs here waiting in their lines (not in the window)."""
        return sum(len(line.members) for line in self._lines.values())

    def lines(self) -> int:
        return len(self._lines)


def _is(pending: Pending | None, seq: int) -> bool:
    return pending is not None and seq_of(pending) == seq
