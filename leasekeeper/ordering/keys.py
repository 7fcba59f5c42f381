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

``KeyBook`` keeps the lines and the jobs here; the jobs out are its ``LaneJobs``'s
(``lane_jobs``). Both are pure (no Kafka, no clock of their own): the engine calls
the book under its lock and carries out the copies it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.ordering.lane_jobs import LaneJobs
from leasekeeper.ordering.line import Line
from leasekeeper.ordering.settling import Settling
from leasekeeper.ordering.values import (
    BlockedLine,
    LaneEntry,
    LineId,
    OnDead,
    Verdict,
    line_of,
    seq_of,
)
from schemas.job import Job

__all__ = ["KeyBook"]


def _decoded(pending: Pending) -> Job:
    """The job of a pending job offered decoded (``JobHead.of``)."""
    full = pending.job.full
    if full is None:
        raise ValueError(f"job {pending.job.job_id} was offered by its headers only")
    return full


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
        self._lines: dict[LineId, Line] = {}
        self._class_of: dict[tuple[str, str], str] = {}  # (tenant, key) -> class topic
        self._dirty: set[LineId] = set()
        self._settling = Settling()  # partitions not yet read to their end when assigned
        self._lane_jobs = LaneJobs(lines=self._lines, dirty=self._dirty, settling=self._settling,
                                   make=self._line, forget=self._forget_if_empty,
                                   on_dead=on_dead, full=full, keep_jobs=keep_jobs)  # fmt: skip

    @property
    def on_dead(self) -> OnDead:
        return self._lane_jobs.on_dead

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
        if line.duplicate(pending, seq):
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
        if line.behind_out(seq, now_ms):
            entry = self._lane_jobs.hold(line, pending, seq, "behind a blocked head")
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
        if seq in line.returning or not line.behind_out(seq, now_ms):
            return None
        del line.members[seq]
        return self._lane_jobs.hold(line, pending, seq, "behind a blocked head")

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

    def _line(self, line_id: LineId) -> Line:
        line = self._lines.get(line_id)
        if line is None:
            line = self._lines[line_id] = Line()
            self._class_of[(line_id.tenant, line_id.key)] = line_id.topic
        return line

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

    def finished(self, pending: Pending) -> None:
        """The line's running job ended here (acked, skipped, or its copy is decided):
        the next may go."""
        line_id = line_of(pending)
        line = self._lines.get(line_id) if line_id is not None else None
        if line is None or line_id is None:
            return
        seq = seq_of(pending)
        if line.is_current(seq):
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
        return line is not None and line.is_current(seq_of(pending))

    def class_of(self, line_id: LineId) -> str:
        """The class topic the line's key is known in here."""
        return self._class_of.get((line_id.tenant, line_id.key), line_id.topic)

    def sweep(self, gone: Callable[[Pending], bool]) -> None:
        """Lines whose running job ended by any other way (cancelled, parked by a breaker,
        dead-lettered as unhandled, its partition moved): ``gone`` says so."""
        for line_id, line in list(self._lines.items()):
            if line.current is not None and gone(line.current):
                line.current = None
                self._dirty.add(line_id)
                self._forget_if_empty(line_id)

    # -- jobs out in the lane (``LaneJobs`` says what each does) --------------------

    def holds(self, now_ms: int) -> list[tuple[Pending, LaneEntry]]:
        return self._lane_jobs.holds(now_ms)

    def settling_holds(
        self, over_span: Callable[[], set[TopicPart]], position: Callable[[TopicPart], int]
    ) -> list[tuple[Pending, LaneEntry]]:
        return self._lane_jobs.settling_holds(over_span, position)

    def failed(self, pending: Pending, job: Job, due_ms: int, reason: str) -> LaneEntry:
        return self._lane_jobs.failed(pending, job, due_ms, reason)

    def parked(self, pending: Pending, job: Job, due_ms: int, reason: str) -> LaneEntry:
        return self._lane_jobs.parked(pending, job, due_ms, reason)

    def died(self, pending: Pending, job: Job, reason: str) -> LaneEntry | None:
        return self._lane_jobs.died(pending, job, reason)

    def sent(self, entry: LaneEntry) -> None:
        self._lane_jobs.sent(entry)

    def stays(self, entry: LaneEntry) -> Pending | None:
        return self._lane_jobs.stays(entry)

    def returns(self, now_ms: int, position: Callable[[TopicPart], int]) -> list[LaneEntry]:
        return self._lane_jobs.returns(now_ms, position)

    def returned(self, entry: LaneEntry) -> None:
        self._lane_jobs.returned(entry)

    def return_dropped(self, entry: LaneEntry) -> None:
        self._lane_jobs.return_dropped(entry)

    def operator_at(self, tp: TopicPart, seq: int, entry: LaneEntry | None) -> None:
        self._lane_jobs.operator_at(tp, seq, entry)

    def operator(self, entry: LaneEntry | None, line_id: LineId, seq: int) -> None:
        self._lane_jobs.operator(entry, line_id, seq)

    def blocked(self) -> list[BlockedLine]:
        return self._lane_jobs.blocked()

    # -- partitions assigned and revoked ------------------------------------------

    def assign(self, tp: TopicPart, end_offset: int, entries: Iterable[LaneEntry]) -> None:
        """A partition assigned, with its lines' lane entries as the lane holds them
        (read to its end). No line of it runs before the partition is fetched up to
        ``end_offset``, its end when assigned (see ``ordering_settling``)."""
        self._settling.begin(tp, end_offset)
        self._lane_jobs.assigned(tp, entries)

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

    def waiting(self) -> int:
        """Jobs here waiting in their lines (not in the window)."""
        return sum(len(line.members) for line in self._lines.values())

    def lines(self) -> int:
        return len(self._lines)
