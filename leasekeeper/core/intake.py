"""Intake: what becomes of a record the consumer loop fetched.

A record already resolved (by this leasekeeper before a restart, or by the
previous owner) is skipped; a record leased before a restart gets its lease
back; a cancelled job, or one whose dedupe key was used, resolves without
running; a feature may then take it or skip it (``OfferHook``: the overflow lane), or hold
it unread (``FetchHold``: a deferred flood) and hand it back later (``offer_again``);
a job with a dedupe key first claims the key durably (a copy to the dedupe topic)
and waits for it (an ordered one in its key's line, ``Lines``); the rest goes into
the ready window, or its delayed heap when not due yet. The engine's lock guards it.
"""

from __future__ import annotations

from collections.abc import Sequence

from jobcore.control import CancelledHow, DedupeClaim, JobEnd
from leasekeeper.core import job_records as records
from leasekeeper.core.clocks import now_ms
from leasekeeper.core.context import EngineContext
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.hooks import FetchHold, Lines, Offer, OfferHook
from leasekeeper.core.job_records import NOTE_OVERDUE_MS, NOTE_PRUNE_INTERVAL_S
from leasekeeper.core.leases import Pending, TopicPart, restore_lease
from leasekeeper.core.partition_book import PartitionBook, PartitionState
from leasekeeper.core.store_values import NoteKind, Resolution
from leasekeeper.core.window import ReadyWindow
from schemas.job_headers import JobHead


class Intake:
    def __init__(
        self,
        *,
        ctx: EngineContext,
        book: PartitionBook,
        window: ReadyWindow,
        copies: CopyQueue,
        lines: Lines,
        hooks: Sequence[OfferHook] = (),
        hold: FetchHold | None = None,
    ) -> None:
        self._lines = lines
        self._hold = hold
        self._hooks = tuple(hooks)
        self._book = book
        self._window = window
        self._copies = copies
        self._store = ctx.store
        self._control = ctx.control
        self._counters = ctx.counters
        self._config = ctx.config
        self._clock = ctx.clock
        self._resolved = ctx.resolved
        self._monotonic = ctx.monotonic
        self._awaiting_claim: dict[str, tuple[Pending, int]] = {}
        self._notes_pruned_at = float("-inf")

    def offer(
        self, tp: TopicPart, offset: int, job: JobHead, envelope: bytes, not_before_ms: int
    ) -> None:
        state = self._book.parts.get(tp)
        if state is None or offset <= state.tracker.highest_fetched:
            return  # not ours, or re-fetched after a pause: already in hand
        self._book.fetched(state, offset)
        self._arrived(state, tp, offset, job, envelope, not_before_ms)

    def holding(self) -> dict[TopicPart, bytes]:
        """Per partition, the key whose records the ``FetchHold`` holds unread."""
        return dict(self._hold.holding()) if self._hold is not None else {}

    def hold(self, tp: TopicPart, offset: int, key: bytes) -> None:
        """A record the ``FetchHold`` holds by its partition and ``key``, not read:
        tracked (unresolved, it holds the commit back), its offset handed to the hold."""
        state = self._book.parts.get(tp)
        if state is None or offset <= state.tracker.highest_fetched:
            return
        self._book.fetched(state, offset)
        if self._hold is not None:
            self._hold.held(tp, offset, key)

    def offer_again(self, tp: TopicPart, offset: int, job: JobHead, envelope: bytes) -> None:
        """A job held or taken when it was fetched (``FetchHold``, ``OfferHook``), handed
        back, read again from Kafka: tracked since then and unresolved, it goes where a
        fresh one would. The hook that took it passes it this time; a cancel since then
        still skips it."""
        state = self._book.parts.get(tp)
        if state is None or state.tracker.is_resolved(offset):
            return
        self._arrived(state, tp, offset, job, envelope, 0)

    def _arrived(
        self,
        state: PartitionState,
        tp: TopicPart,
        offset: int,
        job: JobHead,
        envelope: bytes,
        not_before_ms: int,
    ) -> None:
        if offset in state.resolved_before:
            state.tracker.resolve(offset)
            state.stored_leases.pop(offset, None)
            self._counters.skipped += 1
            return
        pending = Pending(tp, offset, state.generation, job, envelope)
        stored = state.stored_leases.pop(offset, None)
        if stored is not None:
            # Leased before a restart: its worker may still ack with its token;
            # otherwise the reaper takes it back after lease_until.
            lease_s = self._config.lease_for(job.type)
            state.leases[offset] = restore_lease(
                pending, stored, lease_s=lease_s, wall=self._clock(), mono=self._monotonic()
            )
            if job.ordering_key is not None:
                self._lines.restored(pending)
            return
        self._admit(state, pending, not_before_ms)

    def _admit(self, state: PartitionState, pending: Pending, not_before_ms: int) -> None:
        job = pending.job
        if self.skipped(state, pending):
            if job.ordering_key is not None and not_before_ms <= 0:
                self._lines.skipped(pending)
            return
        if self._hooks and self._taken(state, pending):
            return
        if not self._control.needs_claim(job, now_ms(self._clock)):
            self._queue(pending, not_before_ms)
        else:
            self._claim_first(pending, not_before_ms)

    def _taken(self, state: PartitionState, pending: Pending) -> bool:
        """Whether a hook took the job or had it skipped (``OfferHook``)."""
        for hook in self._hooks:
            offered = hook.offered(pending)
            if offered is Offer.SKIP:
                self._skip_copy(state, pending)
                return True
            if offered is Offer.TAKEN:
                return True
        return False

    def _claim_first(self, pending: Pending, not_before_ms: int) -> None:
        """Claim the job's dedupe key before it runs. An ordered job takes its place in
        its line at once: a later job of its key fetched meanwhile must not pass it."""
        if _lined(pending, not_before_ms) and not self._lines.offer(pending, claiming=True):
            return  # a copy of a job the lane has, or a key in another class: no claim
        self._copies.add([self._claim_key(pending, not_before_ms)])

    def _queue(self, pending: Pending, not_before_ms: int) -> None:
        """Into the window, or for an ordered job from its class topic (due now), into
        its line first (``OrderingGate``)."""
        if _lined(pending, not_before_ms):
            self._lines.offer(pending)
        else:
            self._window.queue(pending, not_before_ms, now_ms(self._clock))

    def skipped(self, state: PartitionState, pending: Pending) -> bool:
        """Resolve without running a job that was cancelled, or duplicates a dedupe key
        (noted by id, so that ``inspect job`` can name the original), or is a copy of a
        job already acked here (``ResolvedIds``)."""
        job = pending.job
        control = self._control
        if not control.cancelled and (job.dedupe_key is None or not control.claims):
            return self._acked_before(state, pending)  # the hot path: one look-up
        batch = self._store.batch()
        at = now_ms(self._clock)
        if self._control.is_cancelled(job.job_id):
            self._counters.cancelled += 1
            batch.note(records.skip_note(pending, NoteKind.CANCELLED_WAITING, seen_ms=at))
            ended = records.ended(
                pending, JobEnd.CANCELLED, attempt=0, at_ms=at, how=CancelledHow.WAITING
            )
            self._copies.add([ended])
        elif (original := self._control.duplicate_of(job, at)) is not None:
            self._counters.deduplicated += 1
            note = records.skip_note(
                pending, NoteKind.SKIPPED_DUPLICATE, seen_ms=at, original=original
            )
            batch.note(note)
            # A status record like a finished job's, so every reader can tell.
            ended = records.ended(pending, JobEnd.CANCELLED, attempt=0, at_ms=at,
                                  how=CancelledHow.DUPLICATE, duplicate_of=original)  # fmt: skip
            self._copies.add([ended])
        else:
            # After the dedupe key's check: a user's key keeps its own window.
            return self._acked_before(state, pending)
        batch.resolve(pending.tp.topic, pending.tp.partition, pending.offset, Resolution.SKIPPED)
        self._store.write(batch)
        state.tracker.resolve(pending.offset)
        return True

    def _acked_before(self, state: PartitionState, pending: Pending) -> bool:
        """Skip a copy of a job acked here within the resolved-id window: no batch is
        built unless it is one."""
        if not self._resolved.already_ended(pending.job.job_id, now_ms(self._clock)):
            return False
        self._counters.resolved_again += 1
        batch = self._store.batch()
        batch.resolve(pending.tp.topic, pending.tp.partition, pending.offset, Resolution.SKIPPED)
        self._store.write(batch)
        state.tracker.resolve(pending.offset)
        return True

    def _skip_copy(self, state: PartitionState, pending: Pending) -> None:
        """A copy of a job an ``OfferHook`` knows ran (a second copy read from the
        overflow lane): resolved unrun."""
        self._counters.skipped += 1
        batch = self._store.batch()
        batch.resolve(pending.tp.topic, pending.tp.partition, pending.offset, Resolution.SKIPPED)
        self._store.write(batch)
        state.tracker.resolve(pending.offset)

    def _claim_key(self, pending: Pending, not_before_ms: int) -> CopyRequest:
        """Claim the job's dedupe key durably before the job may run: a restart must not
        forget that the key was used. Later jobs with the key are skipped at once."""
        job = pending.job
        assert job.dedupe_key is not None
        claim = DedupeClaim(
            tenant_id=job.tenant_id,
            dedupe_key=job.dedupe_key,
            job_id=job.job_id,
            seen_at_ms=now_ms(self._clock),
        )
        self._control.remember(claim)
        self._awaiting_claim[pending.lease_id] = (pending, not_before_ms)
        return CopyRequest(
            kind=CopyKind.DEDUPE_CLAIM,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            claim=claim,
            lease_id=pending.lease_id,
        )

    def copy_delivered(self, request: CopyRequest, *, dead: bool, at: int) -> bool:
        """A dedupe claim is durable: its job may run (``claimed``), and the claim's
        source offset is the job's own, which resolves when the job does."""
        if request.kind is not CopyKind.DEDUPE_CLAIM:
            return False
        self.claimed(request)
        return True

    def claimed(self, request: CopyRequest) -> None:
        """The dedupe claim is durable: its job may run now (if its partition stayed),
        unless an earlier claim of its key by another job arrived meanwhile (another
        leasekeeper's: first wins) or it was cancelled; then it is skipped, and an
        ordered one leaves its line, so that the next job of its key goes on."""
        waiting = self._awaiting_claim.pop(request.lease_id, None)
        if waiting is None:
            return
        pending, not_before_ms = waiting
        state = self._book.current(pending.tp, pending.generation)
        if state is None:
            return
        lined = _lined(pending, not_before_ms)
        if self.skipped(state, pending):
            if lined:
                self._lines.finished(pending)
        elif lined:
            self._lines.claimed(pending)
        else:
            self._window.queue(pending, not_before_ms, now_ms(self._clock))

    def copy_dropped(self, request: CopyRequest) -> None:
        self._awaiting_claim.pop(request.lease_id, None)

    # -- notes by job id and status records of cancelled jobs --------------------

    def cancelled_waiting(self, fresh: list[str]) -> None:
        """Status records for freshly cancelled jobs that wait here (in the window, the
        timer or a held tier): they will be skipped, so their status is known now."""
        waiting = {p.job.job_id: p for p in self._window.ready()}
        waiting.update((p.job.job_id, p) for _, p in self._window.delayed())
        at = now_ms(self._clock)
        statuses = [
            records.ended(
                waiting[job_id], JobEnd.CANCELLED, attempt=0, at_ms=at, how=CancelledHow.WAITING
            )
            if job_id in waiting
            else self._noted_cancel(job_id)
            for job_id in fresh
        ]
        self._copies.add([status for status in statuses if status is not None])

    def _noted_cancel(self, job_id: str) -> CopyRequest | None:
        """The status of a cancelled job seen waiting in a held tier, if it is noted."""
        notes = self._store.notes(job_id, limit=1)
        if not notes or notes[0].job_id != job_id or notes[0].kind is not NoteKind.DELAYED:
            return None
        return records.cancelled_in_tier(notes[0], at_ms=now_ms(self._clock))

    def note_delayed(self, tp: TopicPart, offset: int, job: JobHead) -> CopyRequest | None:
        """Remember a delay-tier record by id; the status record to send if the job was
        cancelled already (it will be skipped when due).

        Once per record: a held tier's partition is fetched again from its head each
        time the head's wait is checked, and every record behind the head comes back
        each time. Noting them all again (a store write each) was half of what the
        leasekeeper did for delayed jobs, and re-sent the status of a cancelled one.
        A cancellation that arrives later finds the note (``cancelled_waiting``)."""
        if self.noted(tp, offset):
            return None
        state = self._book.parts.get(tp)
        if state is not None:
            state.noted_through = offset
        note = records.delayed_note(tp, offset, job, seen_ms=now_ms(self._clock))
        batch = self._store.batch()
        batch.note(note)
        self._store.write(batch)
        if not self._control.is_cancelled(job.job_id):
            return None
        return records.cancelled_in_tier(note, at_ms=now_ms(self._clock))

    def noted(self, tp: TopicPart, offset: int) -> bool:
        """Whether the record at ``offset`` of this delay-tier partition is noted (the
        partition's records are noted in offset order, each the first time it is
        fetched under this assignment)."""
        state = self._book.parts.get(tp)
        return state is not None and offset <= state.noted_through

    def prune_notes(self) -> int:
        """Forget, by id, skipped and cancelled jobs older than the dedupe window, and
        delayed jobs overdue by more than ``NOTE_OVERDUE_MS`` (moved on, or run by the
        partition's next owner): at most once per ``NOTE_PRUNE_INTERVAL_S``."""
        now = self._monotonic()
        if now - self._notes_pruned_at < NOTE_PRUNE_INTERVAL_S:
            return 0
        self._notes_pruned_at = now
        wall = now_ms(self._clock)
        return self._store.prune_notes(
            seen_before_ms=wall - self._control.dedupe_window_ms,
            due_before_ms=wall - NOTE_OVERDUE_MS,
        )

    def forget_delayed(self, job_id: str) -> None:
        """A delayed job leaves its tier for the timer or the window: the note is done."""
        batch = self._store.batch()
        batch.forget_note(job_id)
        self._store.write(batch)


def _lined(pending: Pending, not_before_ms: int) -> bool:
    """An ordered job from its class topic (due now) waits in its key's line."""
    return pending.job.ordering_key is not None and not_before_ms <= 0
