"""Where per-key ordering meets the engine: the ``KeyBook`` in the engine's values.

The engine's parts decide copies as usual (a retry, a park, a dead letter);
every copy passes ``route`` on its way into the copy queue, and the copies of a
line's running job are turned into lane copies there: a retry waits in the
ordering lane (not a delay tier, so the line knows it is blocked and by what),
a parked job too, and a dead job blocks its line from the lane first when
``--on-dead block`` says so. Fetched ordered jobs go through ``offer`` instead of
straight into the window; ``turn`` (every loop turn) holds what waits behind a
blocked head, brings back what is due, and releases each line's next job into
the window. The engine's lock guards all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from leasekeeper.core.context import Counters
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.store_values import Resolution
from leasekeeper.core.window import ReadyWindow
from leasekeeper.ordering.keys import KeyBook
from leasekeeper.ordering.values import (
    BlockedLine,
    LaneEntry,
    LaneState,
    Verdict,
    lane_entry,
    line_of,
)
from schemas.job_headers import JobHead
from schemas.vocabulary import DeadLetterReason

# How often lines are checked for a running job that ended by a way not hooked here.
SWEEP_EVERY_MS = 1_000

CONFLICT_DETAIL = (
    "ordering key {key!r} of tenant {tenant!r} is in another priority class here "
    "({other}); a key belongs to one class"
)


class OrderingGate:
    def __init__(
        self,
        *,
        keys: KeyBook,
        book: PartitionBook,
        window: ReadyWindow,
        store: LeaseStore,
        counters: Counters,
        add: Callable[[list[CopyRequest]], None],
        now_ms: Callable[[], int],
        reader: JobReader,
    ) -> None:
        self.keys = keys
        self._reader = reader
        self._book = book
        self._window = window
        self._store = store
        self._counters = counters
        self._add = add
        self._now_ms = now_ms
        self._next_sweep_ms = 0

    # -- fetched jobs ---------------------------------------------------------------

    def offer(self, pending: Pending, *, claiming: bool = False) -> bool:
        """An ordered job fetched from its class partition: into its line, the lane,
        or resolved as a duplicate; then any line's next job into the window. True when
        it is in its line; ``claiming``: it waits there for its dedupe claim (``claimed``)."""
        verdict, entry = self.keys.offer(pending, self._now_ms(), claiming=claiming)
        if verdict is Verdict.HOLD:
            assert entry is not None
            self._add([self._lane_copy(pending, entry)])
        elif verdict is Verdict.RETURNED:
            assert entry is not None
            self._add([self._lane_drop(entry, pending.generation)])
        elif verdict is Verdict.DUPLICATE:
            self._skip(pending)
        elif verdict is Verdict.CONFLICT:
            self._add([self._conflict(pending)])
        self.release()
        return verdict is Verdict.QUEUED or verdict is Verdict.RETURNED

    def claimed(self, pending: Pending) -> None:
        """Its dedupe claim is durable: it runs in its turn (or is held behind its line's
        head in the lane)."""
        entry = self.keys.claimed(pending, self._now_ms())
        if entry is not None:
            self._add([self._lane_copy(pending, entry)])
        self.release()

    def _skip(self, pending: Pending) -> None:
        """Another copy of a job the lane has (a hold or return delivered before a crash)."""
        self._counters.skipped += 1
        self._book.resolve(pending.tp, pending.offset, pending.generation, Resolution.SKIPPED)

    def _conflict(self, pending: Pending) -> CopyRequest:
        line = line_of(pending)
        assert line is not None
        detail = CONFLICT_DETAIL.format(key=line.key, tenant=line.tenant,
                                        other=self.keys.class_of(line))  # fmt: skip
        return CopyRequest(kind=CopyKind.DEAD, source=pending.tp, offset=pending.offset,
                           generation=pending.generation, job=self._reader.full(pending),
                           reason=DeadLetterReason.ORDERING_CONFLICT, detail=detail)  # fmt: skip

    def skipped(self, pending: Pending) -> None:
        """An ordered job skipped on arrival: a held one coming back lets its line go on."""
        entry = self.keys.skipped_arrival(pending)
        if entry is not None:
            self._add([self._lane_drop(entry, pending.generation)])

    def restored(self, pending: Pending) -> None:
        self.keys.restored(pending)

    # -- the line's running job -------------------------------------------------------

    def finished(self, pending: Pending) -> None:
        """The running job was acked or cancelled: the next of its line may go."""
        if pending.job.ordering_key is not None:
            self.keys.finished(pending)
            self.release()

    def route(self, requests: list[CopyRequest]) -> list[CopyRequest]:
        """Copies of a line's running job, as lane copies (see the module's doc)."""
        return [self._routed(request) for request in requests]

    def _routed(self, request: CopyRequest) -> CopyRequest:
        job = request.job
        if job is None or job.ordering_key is None or request.offset < 0:
            return request
        if request.kind not in (CopyKind.RETRY, CopyKind.PARK, CopyKind.DEAD):
            return request
        pending = Pending(request.source, request.offset, request.generation,
                          JobHead.of(job), b"")  # fmt: skip
        if not self.keys.running(pending):
            return request  # not a line's job here (a delay tier's, say)
        if request.kind is CopyKind.RETRY:
            last = job.errors[-1].message if job.errors else ""
            entry = self.keys.failed(pending, job, job.run_at_ms, f"retrying: {last}"[:200])
        elif request.kind is CopyKind.PARK:
            entry = self.keys.parked(pending, job, job.run_at_ms, f"parked: {request.detail}")
        else:
            died = self.keys.died(pending, job, f"dead: {request.detail}"[:200])
            if died is None:
                return request  # the line goes on once the dead letter is durable
            return replace(self._lane_copy(pending, died), then=request)
        return replace(self._lane_copy(pending, entry), kind=CopyKind.LANE)

    # -- every loop turn ----------------------------------------------------------------

    def turn(self) -> None:
        """Hold what waits behind a blocked head, bring back what is due, release."""
        now = self._now_ms()
        if now >= self._next_sweep_ms:  # a backstop: the usual ways out are hooked
            self._next_sweep_ms = now + SWEEP_EVERY_MS
            self.keys.sweep(self._gone)
        held = self.keys.holds(now)
        # A partition paused at its span before it was read to its end when assigned.
        held += self.keys.settling_holds(self._book.over_span, self._position)
        copies = [self._lane_copy(pending, entry) for pending, entry in held]
        for entry in self.keys.returns(now, self._position):
            state = self._book.parts.get(entry.line.tp)
            if state is None:
                self.keys.return_dropped(entry)
                continue
            copies.append(CopyRequest(kind=CopyKind.RETURN, source=entry.line.tp, offset=-1,
                                      generation=state.generation, lane=entry))  # fmt: skip
        self._add(copies)
        self.release()

    def _gone(self, pending: Pending) -> bool:
        state = self._book.current(pending.tp, pending.generation)
        return state is None or state.tracker.is_resolved(pending.offset)

    def release(self) -> None:
        for pending in self.keys.release(self._position):
            self._window.push(pending)

    def _position(self, tp: TopicPart) -> int:
        state = self._book.parts.get(tp)
        return state.tracker.highest_fetched + 1 if state is not None else 0

    # -- copies delivered -----------------------------------------------------------------

    def copy_delivered(self, request: CopyRequest, *, dead: bool, at: int) -> bool:
        """A lane copy or an ordered job's dead letter is durable; True when handled
        here (the engine resolves nothing more)."""
        kind, entry = request.kind, lane_entry(request)
        if kind is CopyKind.DEAD and request.job is not None and request.offset >= 0:
            self._dead_delivered(request)
            return False
        if entry is None:
            return False
        if kind is CopyKind.RETURN:
            return True  # it runs once it is fetched back and its lane record is gone
        if kind is CopyKind.LANE_DROP:
            self.keys.returned(entry)
            self.release()
            return True
        if dead:  # too large for the lane: nothing was written, the job stays here
            self._stays(request, entry)
            return True
        self.keys.sent(entry)
        if request.then is not None:
            self._add([request.then])  # the dead letter resolves the offset
            return True
        how = Resolution.PARKED if entry.state is LaneState.HELD else Resolution.RETRIED
        self._book.resolve(request.source, request.offset, request.generation, how)
        return True

    def _stays(self, request: CopyRequest, entry: LaneEntry) -> None:
        """A lane copy too large for the lane (see docs/ordering.md): the job is never
        dead-lettered for it. Held behind its line's head, it waits here in its line
        (its offset unresolved: the partition's commit waits for it); the line's
        running job runs again here once due (retrying or parked), and a dead one
        blocking its line is dead-lettered with its own reason, its line going on."""
        if request.then is not None:
            self._add([request.then])  # sent as it is: its line does not know it yet
        pending = self.keys.stays(entry)
        if pending is not None and request.then is None:
            self._window.queue(pending, entry.due_ms, self._now_ms())
        self.release()

    def _dead_delivered(self, request: CopyRequest) -> None:
        assert request.job is not None
        pending = Pending(request.source, request.offset, request.generation,
                          JobHead.of(request.job), b"")  # fmt: skip
        if self.keys.running(pending):
            self.finished(pending)

    def copy_dropped(self, request: CopyRequest) -> None:
        entry = lane_entry(request)
        if request.kind is CopyKind.RETURN and entry is not None:
            self.keys.return_dropped(entry)

    # -- the PartitionHook protocol (core/hooks.py) -------------------------------

    def assigned(self, tp: TopicPart, metadata: str | None) -> None:
        pass  # its lines come with the lane's records (``KeyBook.assign``)

    def revoked(self, tp: TopicPart, *, held: bool) -> None:
        self.keys.revoke(tp)

    # -- copies ---------------------------------------------------------------------

    @staticmethod
    def _lane_copy(pending: Pending, entry: LaneEntry) -> CopyRequest:
        return CopyRequest(kind=CopyKind.LANE, source=pending.tp, offset=pending.offset,
                           generation=pending.generation, job=entry.job, lane=entry)  # fmt: skip

    @staticmethod
    def _lane_drop(entry: LaneEntry, generation: int) -> CopyRequest:
        return CopyRequest(kind=CopyKind.LANE_DROP, source=entry.line.tp, offset=-1,
                           generation=generation, lane=entry)  # fmt: skip

    def blocked(self) -> list[BlockedLine]:
        return self.keys.blocked()
