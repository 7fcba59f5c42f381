"""Intake: what becomes of a record the consumer loop fetched.

A record already resolved (by this leasekeeper before a restart, or by the
previous owner) is skipped; a record leased before a restart gets its lease
back; a cancelled job, or one whose dedupe key was used, resolves without
running; a job with a dedupe key first claims the key durably (a copy to the
dedupe topic) and waits for it; the rest goes into the ready window, or its
delayed heap when not due yet. The engine's lock guards it.
"""

from __future__ import annotations

from jobcore.control import DedupeClaim
from leasekeeper.copies import CopyKind, CopyRequest
from leasekeeper.copy_queue import CopyQueue
from leasekeeper.engine_config import EngineContext, now_ms
from leasekeeper.leases import Pending, TopicPart, restore_lease
from leasekeeper.partition_book import PartitionBook, PartitionState
from leasekeeper.store import Resolution
from leasekeeper.window import ReadyWindow
from schemas.job import Job


class Intake:
    def __init__(
        self,
        *,
        ctx: EngineContext,
        book: PartitionBook,
        window: ReadyWindow,
        copies: CopyQueue,
    ) -> None:
        self._book = book
        self._window = window
        self._copies = copies
        self._store = ctx.store
        self._control = ctx.control
        self._counters = ctx.counters
        self._config = ctx.config
        self._clock = ctx.clock
        self._monotonic = ctx.monotonic
        self._awaiting_claim: dict[str, tuple[Pending, int]] = {}

    def offer(
        self, tp: TopicPart, offset: int, job: Job, envelope: bytes, not_before_ms: int
    ) -> None:
        state = self._book.parts.get(tp)
        if state is None or offset <= state.tracker.highest_fetched:
            return  # not ours, or re-fetched after a pause: already in hand
        state.tracker.fetched(offset)
        if offset in state.resolved_before:
            state.tracker.resolve(offset)
            state.stored_leases.pop(offset, None)
            self._counters.skipped += 1
            return
        pending = Pending(
            tp=tp, offset=offset, generation=state.generation, job=job, envelope=envelope
        )
        stored = state.stored_leases.pop(offset, None)
        if stored is not None:
            # Leased before a restart: its worker may still ack with its token;
            # otherwise the reaper takes it back after lease_until.
            lease_s = self._config.lease_for(job.type)
            state.leases[offset] = restore_lease(
                pending, stored, lease_s=lease_s, wall=self._clock(), mono=self._monotonic()
            )
            return
        if self.skipped(state, pending):
            return
        if not self._control.needs_claim(job, now_ms(self._clock)):
            self._window.queue(pending, not_before_ms, now_ms(self._clock))
            return
        self._copies.add([self._claim_key(pending, not_before_ms)])

    def skipped(self, state: PartitionState, pending: Pending) -> bool:
        """Resolve without running a job that was cancelled, or duplicates a dedupe key."""
        job = pending.job
        if self._control.is_cancelled(job.job_id):
            self._counters.cancelled += 1
        elif self._control.duplicate_of(job, now_ms(self._clock)) is not None:
            self._counters.deduplicated += 1
        else:
            return False
        batch = self._store.batch()
        batch.resolve(pending.tp.topic, pending.tp.partition, pending.offset, Resolution.SKIPPED)
        self._store.write(batch)
        state.tracker.resolve(pending.offset)
        return True

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

    def claimed(self, request: CopyRequest) -> None:
        """The dedupe claim is durable: its job may run now (if its partition stayed)."""
        waiting = self._awaiting_claim.pop(request.lease_id, None)
        if waiting is None:
            return
        pending, not_before_ms = waiting
        if self._book.current(pending.tp, pending.generation) is not None:
            self._window.queue(pending, not_before_ms, now_ms(self._clock))

    def claim_dropped(self, request: CopyRequest) -> None:
        self._awaiting_claim.pop(request.lease_id, None)
