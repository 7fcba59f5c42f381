"""The fetcher's port: records read from Kafka become ready jobs, notes or copies.

Called by the consumer loop's fetch path and slow path (``leasekeeper/kafka/``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from leasekeeper.core.clocks import now_ms
from leasekeeper.core.control_state import ControlState
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.hooks import DispatchGate, Lines
from leasekeeper.core.intake import Intake
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.store_values import Resolution
from leasekeeper.core.window import ReadyWindow
from schemas.job import Job
from schemas.job_headers import JobHead
from schemas.vocabulary import DeadLetterReason

__all__ = ["FetchPort"]


class FetchPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        intake: Intake,
        book: PartitionBook,
        window: ReadyWindow,
        copies: CopyQueue,
        control: ControlState,
        gates: Sequence[DispatchGate],
        lines: Lines,
        clock: Callable[[], float],
        window_records: int,
    ) -> None:
        self._lock = lock
        self._intake = intake
        self._book = book
        self._window = window
        self._copies = copies
        self._control = control
        self._gates = tuple(gates)
        self._lines = lines
        self._clock = clock
        self.window_records = window_records

    def offer(
        self,
        tp: TopicPart,
        offset: int,
        job: JobHead | Job,
        envelope: bytes,
        not_before_ms: int = 0,
    ) -> None:
        """A record from Kafka, read from its headers (``JobHead``) or decoded (``Job``):
        skip it if already resolved, else queue it (for dispatch at once, or at
        ``not_before_ms``)."""
        head = job if isinstance(job, JobHead) else JobHead.of(job)
        with self._lock:
            self._intake.offer(tp, offset, head, envelope, not_before_ms)

    def offer_many(self, records: Sequence[tuple[TopicPart, int, JobHead | None, bytes]]) -> None:
        """Records due now, in fetch order, under one hold of the lock: taking it once
        per record was the leasekeeper's largest single cost at high rates. A record
        without a head is one the ``FetchHold`` holds unread (``holding``), with its
        key in place of the envelope."""
        with self._lock:
            intake = self._intake
            offer = intake.offer
            for tp, offset, head, envelope in records:
                if head is None:
                    intake.hold(tp, offset, envelope)  # the record's key, read alone
                else:
                    offer(tp, offset, head, envelope, 0)

    def holding(self) -> dict[TopicPart, bytes]:
        """Per partition, the record key (a tenant) whose records a fetch holds unread:
        it hands them to ``offer_many`` without a head."""
        with self._lock:
            return self._intake.holding()

    def offer_again(
        self,
        records: Sequence[tuple[TopicPart, int, JobHead, bytes]],
        taken: Callable[[TopicPart, int], bool],
    ) -> int:
        """Jobs an ``OfferHook`` took on fetch, read again from Kafka and handed back in
        offset order: each one that ``taken`` (asked under the lock, in order) says
        the hook still holds goes where a fresh job would; returns how many went."""
        given = 0
        with self._lock:
            for tp, offset, head, envelope in records:
                if taken(tp, offset):
                    self._intake.offer_again(tp, offset, head, envelope)
                    given += 1
        return given

    def dead_letter_again(
        self,
        tp: TopicPart,
        offset: int,
        raw: tuple[bytes | None, bytes | None],
        reason: str,
        taken: Callable[[TopicPart, int], bool],
    ) -> None:
        """A record an ``OfferHook`` or the ``FetchHold`` kept unread, read again and
        found undecodable: dead-lettered with the reason (``raw``: its key and value),
        as one read the first time would be; it resolves once that copy is durable."""
        with self._lock:
            state = self._book.parts.get(tp)
            if not taken(tp, offset) or state is None or state.tracker.is_resolved(offset):
                return
            key, value = raw
            self._copies.add([CopyRequest(kind=CopyKind.DEAD_RAW, source=tp, offset=offset,
                                          generation=state.generation, raw_key=key,
                                          raw_value=value, reason=DeadLetterReason.UNDECODABLE,
                                          detail=reason)])  # fmt: skip

    def let_go(self, tp: TopicPart, offset: int, gone: Callable[[TopicPart, int], bool]) -> None:
        """A record kept unread that Kafka no longer has (retention or compaction deleted
        it before it was read again): resolved unrun, as a consumer resetting to the
        earliest offset skips what was deleted."""
        with self._lock:
            state = self._book.parts.get(tp)
            if gone(tp, offset) and state is not None:
                self._book.resolve(tp, offset, state.generation, Resolution.SKIPPED)

    def cancellations_arrived(self) -> None:
        """Answer at once for cancelled jobs that wait here (in the window, the timer or
        a held tier): they will be skipped, so their status is known now, and
        ``producer cancel`` can say so. A running one is answered when its lease ends."""
        fresh = self._control.take_fresh()
        if fresh:
            with self._lock:
                self._intake.cancelled_waiting(fresh)

    def note_delayed(self, tp: TopicPart, offset: int, job: JobHead) -> None:
        """A delay-tier record seen and left in Kafka until due: remembered by id for
        ``inspect job`` (the record itself stays the only copy of the job)."""
        status = self._intake.note_delayed(tp, offset, job)
        if status is not None:
            with self._lock:
                self._copies.add([status])

    def noted(self, tp: TopicPart, offset: int) -> bool:
        """Whether this delay-tier record is noted already (``note_delayed``)."""
        return self._intake.noted(tp, offset)

    def prune_notes(self) -> int:
        """Forget old notes by job id (see ``Intake.prune_notes``); returns how many."""
        return self._intake.prune_notes()

    def forget_delayed(self, job_id: str) -> None:
        """A delayed job leaves its tier for the timer or the window: the note is done."""
        self._intake.forget_delayed(job_id)

    def track_unoffered(self, tp: TopicPart, offset: int) -> int | None:
        """Track a record that will not be dispatched (undecodable, or hopping to another
        delay tier); returns its generation for the copy, None if it needs none."""
        with self._lock:
            return self._book.track_unoffered(tp, offset)

    def promote_due(self) -> int:
        """Move delayed jobs whose time came to the ready window; returns how many. Then
        the gates take what they hold back (an open breaker parks its type's jobs) and
        the ordered lines take their turn (called every loop turn)."""
        with self._lock:
            live = self._book.live
            moved = self._window.promote_due(now_ms(self._clock), lambda p: live(p) is not None)
            for gate in self._gates:
                self._copies.add(gate.sweep(self._window))
            self._lines.turn()
            return moved

    def window_room(self) -> int:
        """How many more records the window takes (0 when full by records or bytes)."""
        with self._lock:
            return self._window.room()

    def over_share(
        self, fetching: set[TopicPart], unit: Callable[[TopicPart], object] | None = None
    ) -> tuple[set[TopicPart], int]:
        """The partitions a full window pauses (those holding their share of it or
        more) and the records the others may still fetch: see ``ReadyWindow.over_share``."""
        with self._lock:
            return self._window.over_share(fetching, unit)
