"""The lease engine: the leasekeeper's state machine, free of Kafka and gRPC.

The consumer loop offers fetched jobs; workers claim, heartbeat and settle
through the RPC layer; the engine decides what is dispatched next (the fairness
policy), what is persisted first (claims before hand-out, acks before answering),
what goes to the retry path or the DLQ, and which offset each partition may
commit (the ``CommitTracker``). Copies to Kafka are decided here as values
(``CopyRequest``) and queued; the outbox, on the Kafka loop's thread, sends them
and reports back, so no RPC thread ever produces. One lock guards it all; every
public method is short, so contention stays low at batch sizes of tens to
hundreds of jobs per call.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from jobcore.control import CancelledHow, DedupeClaim, JobEnd
from leasekeeper import job_records as records
from leasekeeper.commit_tracker import CommitTracker
from leasekeeper.control_state import ControlState
from leasekeeper.copies import CopyKind, CopyRequest, cap_error
from leasekeeper.fairness import TenantRoundRobin
from leasekeeper.id_prefix import PrefixError, resolve_prefix
from leasekeeper.job_records import NOTE_OVERDUE_MS, NOTE_PRUNE_INTERVAL_S
from leasekeeper.job_view import (
    JobState,
    base_view,
    cancel_recorded_view,
    cancelled_view,
    note_view,
    unknown_view,
)
from leasekeeper.leases import (
    Grant,
    Lease,
    LeaseAnswer,
    Outcome,
    Pending,
    Settlement,
    TopicPart,
    mint_token,
    parse_lease_id,
)
from leasekeeper.offset_metadata import MAX_SPAN, METADATA_LIMIT, Progress
from leasekeeper.offset_metadata import decode as decode_progress
from leasekeeper.offset_metadata import encode as encode_progress
from leasekeeper.retry_budget import RetryBudget
from leasekeeper.retry_policy import RetryPolicies
from leasekeeper.settle_in import SettleIn
from leasekeeper.store import (
    LeaseRecord,
    LeaseStore,
    NoteKind,
    Resolution,
    StoreBatch,
)
from leasekeeper.workers_seen import ConnectedWorkers
from schemas.job import AttemptError, DeadLetterReason, Job

log = logging.getLogger(__name__)

# Settlements remembered so that a resend (the first answer was lost to an RPC
# deadline) is answered "applied", not refused as an unknown lease.
RECENT_SETTLEMENTS = 100_000
RETRY_LATER = "retry later: this leasekeeper is still taking its partitions back"
UNKNOWN_JOB_TYPE = "UnknownJobType"

# What a delivered copy makes of its source offset.
_RESOLUTIONS = {
    CopyKind.RETRY: Resolution.RETRIED,
    CopyKind.HOP: Resolution.HOPPED,
    CopyKind.DEAD: Resolution.DEAD,
    CopyKind.DEAD_RAW: Resolution.DEAD,
}


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    lease_s: float = 30.0
    lease_s_by_type: Mapping[str, float] = field(default_factory=dict)
    window_records: int = 10_000
    window_bytes: int = 64 * 1024 * 1024
    # How far beyond its commit a partition may be fetched: what commit metadata
    # can describe when the partition moves (see offset_metadata).
    max_span: int = MAX_SPAN
    # The reaper's backstop for a job that heartbeats but never finishes; the
    # worker enforces timeout_s itself, this catches a worker that cannot.
    timeout_grace_s: float = 5.0
    retries: RetryPolicies = field(default_factory=RetryPolicies)
    # After a (re)start, leases not known yet are answered "retry later" until the
    # partitions are back and re-read, or for this long at most.
    settle_in_max_s: float = 30.0
    # A job no connected worker can run waits this long (from the first time no
    # worker could take it) before it fails as UnknownJobType.
    unknown_type_grace_s: float = 600.0
    # A worker counts as connected this long after its last claim.
    worker_seen_s: float = 60.0

    def lease_for(self, job_type: str) -> float:
        return self.lease_s_by_type.get(job_type, self.lease_s)


@dataclass(kw_only=True)
class PartitionState:
    tp: TopicPart
    generation: int
    tracker: CommitTracker
    resolved_before: dict[int, Resolution]
    claims: dict[int, int]
    stored_leases: dict[int, LeaseRecord]
    leases: dict[int, Lease] = field(default_factory=dict)
    unhandled_since: dict[int, int] = field(default_factory=dict)
    committed: int = -1
    committed_metadata: str = ""
    copies_in_flight: int = 0
    draining: bool = False
    # Lowered when the broker refuses the metadata (offset.metadata.max.bytes < 4 KB).
    metadata_limit: int = METADATA_LIMIT


@dataclass(kw_only=True)
class Counters:
    acked: int = 0
    nacked: int = 0
    released: int = 0
    expired: int = 0
    retried: int = 0
    dead: int = 0
    skipped: int = 0
    cancelled: int = 0
    deduplicated: int = 0
    stale_rejected: int = 0


def now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


class LeaseEngine:
    def __init__(
        self,
        *,
        store: LeaseStore,
        config: EngineConfig,
        budget: RetryBudget | None = None,
        control: ControlState | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        """``clock`` is wall time (run_at, dedupe windows, what workers see);
        ``monotonic`` times lease deadlines, timeouts and waits."""
        self.control = control or ControlState()
        self._budget = budget or RetryBudget()
        self._rng = rng or random.Random()
        self._store = store
        # Copies decided but not yet taken by the outbox (any thread appends).
        self._copies: list[CopyRequest] = []
        self._config = config
        self._clock = clock
        self._monotonic = monotonic
        self._cond = threading.Condition()
        self._parts: dict[TopicPart, PartitionState] = {}
        self._ready: TenantRoundRobin[Pending] = TenantRoundRobin(kind=_job_type)
        self._settle_in = SettleIn(until=monotonic() + config.settle_in_max_s)
        self._workers = ConnectedWorkers(forget_after_ms=int(config.worker_seen_s * 1000))
        self._ready_bytes = 0
        # Jobs fetched less than one tier before their run_at wait here, not in a
        # paused partition (which would hold back the records behind them).
        self._delayed: list[tuple[int, int, Pending]] = []
        self._notes_pruned_at = float("-inf")
        self._delay_seq = itertools.count()
        self._awaiting_claim: dict[str, tuple[Pending, int]] = {}
        self._generation = 0
        self._closed = False
        self._recently_settled: OrderedDict[tuple[str, str], None] = OrderedDict()
        # The smallest metadata limit a broker accepted so far: new partitions start there.
        self._metadata_limit = METADATA_LIMIT
        self.counters = Counters()

    # -- partitions -------------------------------------------------------

    def assign(self, tp: TopicPart, committed: int, metadata: str | None = None) -> None:
        """Take a partition from ``committed`` on, remembering what the store knows and
        what the previous owner left in the commit metadata (whichever knows more)."""
        start = max(committed, 0)
        memory = self._store.load(tp.topic, tp.partition, start)
        moved = decode_progress(start, metadata)
        resolved = {o: Resolution.SKIPPED for o in moved.resolved}
        resolved.update(memory.resolved)
        claims = dict(moved.claims)
        for offset, count in memory.claims.items():
            claims[offset] = max(count, claims.get(offset, 0))
        with self._cond:
            self._generation += 1
            self._parts[tp] = PartitionState(
                tp=tp,
                generation=self._generation,
                tracker=CommitTracker(start),
                resolved_before=resolved,
                claims=claims,
                stored_leases=dict(memory.leases),
                unhandled_since=dict(memory.unhandled),
                committed=committed,
                committed_metadata=metadata or "",
                metadata_limit=self._metadata_limit,
            )

    def assignment_received(self) -> None:
        """The consumer applied the group's first assignment in full (possibly empty)."""
        with self._cond:
            self._settle_in.assignment_received()

    def settling_in(self) -> bool:
        """True while leases not known yet are answered "retry later" (see SettleIn)."""
        with self._cond:
            return self._still_settling()

    def begin_revoke(self, tps: set[TopicPart]) -> None:
        """Stop dispatching from partitions about to move; their leases may still settle."""
        with self._cond:
            for tp in tps:
                state = self._parts.get(tp)
                if state is not None:
                    state.draining = True
            removed = self._ready.remove_if(lambda p: p.tp in tps)
            self._ready_bytes -= sum(len(p.envelope) for p in removed)
            self._drop_delayed(lambda p: p.tp in tps)

    def _drop_delayed(self, predicate: Callable[[Pending], bool]) -> None:
        self._delayed = [item for item in self._delayed if not predicate(item[2])]
        heapq.heapify(self._delayed)

    def in_flight(self, tps: set[TopicPart] | None = None) -> int:
        """Leases and copies not yet settled in ``tps`` (all partitions by default). Every
        copy counts from the moment it is decided until the outbox delivered or dropped
        it: retries, dead letters, hops, raw dead letters and dedupe claims alike."""
        with self._cond:
            return sum(
                len(state.leases) + state.copies_in_flight
                for tp, state in self._parts.items()
                if tps is None or tp in tps
            )

    def revoke(self, tp: TopicPart) -> None:
        """Forget a partition: its ready jobs leave the window, its leases become unknown."""
        with self._cond:
            state = self._parts.pop(tp, None)
            if state is None:
                return
            removed = self._ready.remove_if(lambda p: p.tp == tp)
            self._ready_bytes -= sum(len(p.envelope) for p in removed)
            self._drop_delayed(lambda p: p.tp == tp)

    def assigned(self) -> list[TopicPart]:
        with self._cond:
            return list(self._parts)

    # -- fetching ---------------------------------------------------------

    def offer(
        self, tp: TopicPart, offset: int, job: Job, envelope: bytes, not_before_ms: int = 0
    ) -> None:
        """A decoded record from Kafka: skip it if already resolved, else queue it (for
        dispatch at once, or at ``not_before_ms``)."""
        with self._cond:
            state = self._parts.get(tp)
            if state is None or offset <= state.tracker.highest_fetched:
                return  # not ours, or re-fetched after a pause: already in hand
            state.tracker.fetched(offset)
            if offset in state.resolved_before:
                state.tracker.resolve(offset)
                state.stored_leases.pop(offset, None)
                self.counters.skipped += 1
                return
            pending = Pending(
                tp=tp, offset=offset, generation=state.generation, job=job, envelope=envelope
            )
            stored = state.stored_leases.pop(offset, None)
            if stored is not None:
                # Leased before a restart: its worker may still ack with its token;
                # otherwise the reaper takes it back after lease_until.
                state.leases[offset] = self._restore(pending, stored)
                return
            if self._skipped(state, pending):
                return
            if not self.control.needs_claim(job, now_ms(self._clock)):
                self._queue(pending, not_before_ms)
                return
            self._enqueue([self._claim_key(pending, not_before_ms)])

    def _queue(self, pending: Pending, not_before_ms: int) -> None:
        """Into the ready window, or the delay timer when it is not due yet."""
        if not_before_ms > now_ms(self._clock):
            heapq.heappush(self._delayed, (not_before_ms, next(self._delay_seq), pending))
        else:
            self._push_ready(pending)

    def _push_ready(self, pending: Pending) -> None:
        self._ready.push(pending.job.tenant_id, pending)
        self._ready_bytes += len(pending.envelope)
        # Every claimer wakes: the one woken alone might not run this job's type.
        self._cond.notify_all()

    def _skipped(self, state: PartitionState, pending: Pending) -> bool:
        """Resolve without running a job that was cancelled, or duplicates a dedupe key
        (noted by id, so that ``inspect job`` can name the original)."""
        job = pending.job
        batch = self._store.batch()
        if self.control.is_cancelled(job.job_id):
            self.counters.cancelled += 1
            at = now_ms(self._clock)
            batch.note(records.skip_note(pending, NoteKind.CANCELLED_WAITING, seen_ms=at))
            self._enqueue(
                [
                    records.ended(
                        pending, JobEnd.CANCELLED, attempt=0, at_ms=at, how=CancelledHow.WAITING
                    )
                ]
            )
        elif (original := self.control.duplicate_of(job, now_ms(self._clock))) is not None:
            self.counters.deduplicated += 1
            batch.note(
                records.skip_note(
                    pending,
                    NoteKind.SKIPPED_DUPLICATE,
                    seen_ms=now_ms(self._clock),
                    original=original,
                )
            )
        else:
            return False
        batch.resolve(pending.tp.topic, pending.tp.partition, pending.offset, Resolution.SKIPPED)
        self._store.write(batch)
        state.tracker.resolve(pending.offset)
        return True

    def cancellations_arrived(self) -> None:
        """Answer at once for cancelled jobs that wait here (in the window, the timer or
        a held tier): they will be skipped, so their status is known now, and
        ``producer cancel`` can say so. A running one is answered when its lease ends."""
        fresh = self.control.take_fresh()
        if not fresh:
            return
        with self._cond:
            waiting = {p.job.job_id: p for p in self._ready}
            waiting.update((p.job.job_id, p) for _, _, p in self._delayed)
            at = now_ms(self._clock)
            statuses: list[CopyRequest | None] = [
                records.ended(
                    waiting[job_id], JobEnd.CANCELLED, attempt=0, at_ms=at, how=CancelledHow.WAITING
                )
                if job_id in waiting
                else self._noted_cancel(job_id)
                for job_id in fresh
            ]
            self._enqueue([status for status in statuses if status is not None])

    def _noted_cancel(self, job_id: str) -> CopyRequest | None:
        """The status of a cancelled job seen waiting in a held tier, if it is noted."""
        notes = self._store.notes(job_id, limit=1)
        if not notes or notes[0].job_id != job_id or notes[0].kind is not NoteKind.DELAYED:
            return None
        return records.cancelled_in_tier(notes[0], at_ms=now_ms(self._clock))

    def note_delayed(self, tp: TopicPart, offset: int, job: Job) -> None:
        """A delay-tier record seen and left in Kafka until due: remembered by id for
        ``inspect job`` (the record itself stays the only copy of the job)."""
        note = records.delayed_note(tp, offset, job, seen_ms=now_ms(self._clock))
        batch = self._store.batch()
        batch.note(note)
        self._store.write(batch)
        if self.control.is_cancelled(job.job_id):  # it will be skipped when due: say so now
            with self._cond:
                self._enqueue([records.cancelled_in_tier(note, at_ms=now_ms(self._clock))])

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
            seen_before_ms=wall - self.control.dedupe_window_ms,
            due_before_ms=wall - NOTE_OVERDUE_MS,
        )

    def forget_delayed(self, job_id: str) -> None:
        """A delayed job leaves its tier for the timer or the window: the note is done."""
        batch = self._store.batch()
        batch.forget_note(job_id)
        self._store.write(batch)

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
        self.control.remember(claim)
        self._awaiting_claim[pending.lease_id] = (pending, not_before_ms)
        return CopyRequest(
            kind=CopyKind.DEDUPE_CLAIM,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            claim=claim,
            lease_id=pending.lease_id,
        )

    def promote_due(self) -> int:
        """Move delayed jobs whose time came to the ready window; returns how many."""
        with self._cond:
            now = now_ms(self._clock)
            moved = 0
            while self._delayed and self._delayed[0][0] <= now:
                _, _, pending = heapq.heappop(self._delayed)
                state = self._parts.get(pending.tp)
                if state is None or state.generation != pending.generation or state.draining:
                    continue
                self._ready.push(pending.job.tenant_id, pending)
                self._ready_bytes += len(pending.envelope)
                moved += 1
            if moved:
                self._cond.notify_all()
            return moved

    def _restore(self, pending: Pending, stored: LeaseRecord) -> Lease:
        """A lease from before a restart: the one place epoch times become deadlines
        (the monotonic clock does not survive the process)."""
        wall, mono = self._clock(), self._monotonic()
        return Lease(
            pending=pending,
            token=stored.token,
            worker=stored.worker,
            attempt=stored.attempt,
            lease_s=self._config.lease_for(pending.job.type),
            started_ms=stored.started_ms,
            until_ms=stored.until_ms,
            started_at=mono - max(0.0, wall - stored.started_ms / 1000),
            deadline=mono + (stored.until_ms / 1000 - wall),
        )

    def track_unoffered(self, tp: TopicPart, offset: int) -> int | None:
        """Track a record that will not be dispatched (undecodable, or hopping to another
        delay tier); returns its generation for the copy, None if it needs none."""
        with self._cond:
            state = self._parts.get(tp)
            if state is None or offset <= state.tracker.highest_fetched:
                return None
            state.tracker.fetched(offset)
            state.stored_leases.pop(offset, None)
            if offset in state.resolved_before:
                state.tracker.resolve(offset)
                return None
            return state.generation

    @property
    def window_records(self) -> int:
        return self._config.window_records

    def window_room(self) -> int:
        """How many more records the window takes (0 when full by records or bytes)."""
        with self._cond:
            if self._ready_bytes >= self._config.window_bytes:
                return 0
            held = len(self._ready) + len(self._delayed)
            return max(0, self._config.window_records - held)

    def window_full(self) -> bool:
        return self.window_room() == 0

    # -- claiming ---------------------------------------------------------

    def claim(
        self, worker: str, max_jobs: int, wait_s: float, job_types: frozenset[str] = frozenset()
    ) -> list[Grant]:
        """Hand out up to ``max_jobs`` of ``job_types`` (empty: any type), waiting up to
        ``wait_s`` for the first one. Jobs of other types stay for other workers."""
        deadline = self._monotonic() + wait_s
        grants: list[Grant] = []
        actions: list[CopyRequest] = []
        accept = _of_types(job_types)
        with self._cond:
            self._workers.saw(worker, job_types, now_ms(self._clock))
            while not self._ready.has_any(job_types) and not self._closed:
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    return []
                self._cond.wait(remaining)
            if self._closed:
                # Draining for shutdown: hand out nothing new, but keep the long
                # poll so workers do not spin while their last acks come in.
                remaining = deadline - self._monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                return []
            batch = self._store.batch()
            while len(grants) < max_jobs:
                pending = self._ready.pop(accept)
                if pending is None:
                    break
                self._ready_bytes -= len(pending.envelope)
                grant = self._lease(pending, worker, batch, actions)
                if grant is not None:
                    grants.append(grant)
            # Attempts are counted before the jobs leave (invariant 4).
            self._store.write(batch)
            self._enqueue(actions)
        return grants

    def _lease(
        self, pending: Pending, worker: str, batch: StoreBatch, actions: list[CopyRequest]
    ) -> Grant | None:
        state = self._parts.get(pending.tp)
        if state is None or state.generation != pending.generation or state.draining:
            return None
        if self._skipped(state, pending):
            return None  # cancelled while it waited
        job = pending.job
        prior = state.claims.get(pending.offset, 0)
        if job.attempt + prior >= job.max_attempts:
            # The job used every attempt without ever being settled: its worker
            # died each time (poison pill). It goes to the DLQ instead of looping.
            actions.append(self._dead_action(pending, job, "attempts exhausted", _crash_note(job)))
            return None
        if job.attempt == 0 and prior == 0:
            self._budget.record_first_attempt()
        state.claims[pending.offset] = prior + 1
        batch.claims(pending.tp.topic, pending.tp.partition, pending.offset, prior + 1)
        lease_s = self._config.lease_for(job.type)
        start = now_ms(self._clock)
        mono = self._monotonic()
        lease = Lease(
            pending=pending,
            token=mint_token(),
            worker=worker,
            attempt=job.attempt + prior + 1,
            lease_s=lease_s,
            started_ms=start,
            until_ms=start + int(lease_s * 1000),
            started_at=mono,
            deadline=mono + lease_s,
        )
        state.leases[pending.offset] = lease
        batch.lease(pending.tp.topic, pending.tp.partition, pending.offset, _record(lease))
        return Grant(
            lease_id=pending.lease_id,
            token=lease.token,
            until_ms=lease.until_ms,
            attempt=lease.attempt,
            lease_s=lease_s,
            envelope=pending.envelope,
        )

    # -- heartbeats and settlements ----------------------------------------

    def _find(self, lease_id: str, token: str) -> tuple[PartitionState, Lease] | LeaseAnswer:
        """The lease a call names, or the answer refusing it. A lease this leasekeeper
        may still learn of (settling in, or its offset not re-read yet) is "retry
        later"; one on a partition it does not own is never accepted: it may be
        assigned elsewhere."""
        try:
            tp, offset = parse_lease_id(lease_id)
        except ValueError:
            return _refused(lease_id, "malformed lease id")
        state = self._parts.get(tp)
        lease = state.leases.get(offset) if state else None
        if lease is None:
            if self._not_known_yet(state, offset):
                return LeaseAnswer(
                    lease_id=lease_id, ok=False, reason=RETRY_LATER, retry_later=True
                )
            return _refused(lease_id, "unknown lease (expired, settled or moved)")
        assert state is not None
        if lease.token != token:
            return _refused(lease_id, "stale token")
        return state, lease

    def _not_known_yet(self, state: PartitionState | None, offset: int) -> bool:
        if state is not None and offset in state.stored_leases:
            return True  # leased before the restart; its record is not re-read yet
        return state is None and self._still_settling()

    def _still_settling(self) -> bool:
        return self._settle_in.active(
            self._monotonic(), lambda: any(s.stored_leases for s in self._parts.values())
        )

    def _refusal(self, found: LeaseAnswer) -> LeaseAnswer:
        if not found.retry_later:
            self.counters.stale_rejected += 1
        return found

    def heartbeat(self, leases: list[tuple[str, str]]) -> list[LeaseAnswer]:
        answers = []
        with self._cond:
            now = now_ms(self._clock)
            batch = self._store.batch()
            for lease_id, token in leases:
                found = self._find(lease_id, token)
                if isinstance(found, LeaseAnswer):
                    answers.append(self._refusal(found))
                    continue
                state, lease = found
                if self._end_if_cancelled(state, lease, batch):
                    answers.append(LeaseAnswer(lease_id=lease_id, ok=False, reason="cancelled"))
                    continue
                lease.until_ms = now + int(lease.lease_s * 1000)
                lease.deadline = self._monotonic() + lease.lease_s
                tp, offset = lease.pending.tp, lease.pending.offset
                batch.lease(tp.topic, tp.partition, offset, _record(lease))
                answers.append(LeaseAnswer(lease_id=lease_id, ok=True, until_ms=lease.until_ms))
            self._store.write(batch)
        return answers

    def _end_if_cancelled(self, state: PartitionState, lease: Lease, batch: StoreBatch) -> bool:
        """A running job that was cancelled loses its lease and is never run again."""
        if not self.control.is_cancelled(lease.pending.job.job_id):
            return False
        offset = lease.pending.offset
        del state.leases[offset]
        batch.unlease(state.tp.topic, state.tp.partition, offset)
        batch.resolve(state.tp.topic, state.tp.partition, offset, Resolution.SKIPPED)
        at = now_ms(self._clock)
        batch.note(records.skip_note(lease.pending, NoteKind.CANCELLED_RUNNING, seen_ms=at))
        self._enqueue(
            [
                records.ended(
                    lease.pending,
                    JobEnd.CANCELLED,
                    attempt=lease.attempt,
                    at_ms=at,
                    how=CancelledHow.RUNNING,
                )
            ]
        )
        state.tracker.resolve(offset)
        self.counters.cancelled += 1
        return True

    def settle(self, settlements: list[Settlement]) -> list[LeaseAnswer]:
        """Acks are persisted before the answer; nacks are resolved once copied durably."""
        answers: list[LeaseAnswer] = []
        actions: list[CopyRequest] = []
        with self._cond:
            batch = self._store.batch()
            for item in settlements:
                found = self._find(item.lease_id, item.token)
                if isinstance(found, LeaseAnswer):
                    if (item.lease_id, item.token) in self._recently_settled:
                        found = LeaseAnswer(
                            lease_id=item.lease_id, ok=True, reason="already settled"
                        )
                        answers.append(found)
                        continue
                    answers.append(self._refusal(found))
                    continue
                state, lease = found
                self._remember_settled(item.lease_id, item.token)
                del state.leases[lease.pending.offset]
                batch.unlease(state.tp.topic, state.tp.partition, lease.pending.offset)
                self._apply(state, lease, item, batch, actions)
                answers.append(LeaseAnswer(lease_id=item.lease_id, ok=True))
            self._store.write(batch)
            self._enqueue(actions)
        return answers

    def _remember_settled(self, lease_id: str, token: str) -> None:
        self._recently_settled[(lease_id, token)] = None
        if len(self._recently_settled) > RECENT_SETTLEMENTS:
            self._recently_settled.popitem(last=False)

    def _apply(
        self,
        state: PartitionState,
        lease: Lease,
        item: Settlement,
        batch: StoreBatch,
        actions: list[CopyRequest],
    ) -> None:
        pending = lease.pending
        if item.outcome is Outcome.ACK:
            self.counters.acked += 1
            batch.resolve(pending.tp.topic, pending.tp.partition, pending.offset, Resolution.ACKED)
            actions.append(
                records.ended(
                    pending, JobEnd.SUCCEEDED, attempt=lease.attempt, at_ms=now_ms(self._clock)
                )
            )
            state.tracker.resolve(pending.offset)
        elif item.outcome is Outcome.RELEASE:
            # Not run: the attempt is given back and the job goes to the front.
            self.counters.released += 1
            count = max(0, state.claims.get(pending.offset, 1) - 1)
            state.claims[pending.offset] = count
            batch.claims(pending.tp.topic, pending.tp.partition, pending.offset, count)
            self._ready.push_front(pending.job.tenant_id, pending)
            self._ready_bytes += len(pending.envelope)
            self._cond.notify_all()
        else:
            self.counters.nacked += 1
            error = cap_error(
                AttemptError(
                    attempt=lease.attempt,
                    at_ms=now_ms(self._clock),
                    worker=lease.worker,
                    error_class=item.error_class or "Error",
                    message=item.message,
                    traceback=item.traceback,
                )
            )
            actions.append(
                self._failure_action(
                    lease, error, permanent=item.permanent, retry_after_s=item.retry_after_s
                )
            )

    def expire(self) -> int:
        """The reaper: leases past ``until`` count as failed attempts (worker presumed dead)."""
        actions: list[CopyRequest] = []
        with self._cond:
            now = self._monotonic()
            batch = self._store.batch()
            for state in self._parts.values():
                for offset, lease in list(state.leases.items()):
                    error = self._overdue(lease, now)
                    if error is None:
                        continue
                    del state.leases[offset]
                    batch.unlease(state.tp.topic, state.tp.partition, offset)
                    self.counters.expired += 1
                    actions.append(self._failure_action(lease, error, permanent=False))
            self._store.write(batch)
            self._enqueue(actions)
        return len(actions)

    def _overdue(self, lease: Lease, now: float) -> AttemptError | None:
        """Why the reaper takes a lease back (``now`` is monotonic): expired, or running
        past timeout_s."""
        job = lease.pending.job
        if now > lease.started_at + job.timeout_s + self._config.timeout_grace_s:
            error_class = "JobTimeout"
            message = f"ran longer than timeout_s={job.timeout_s:g}s (taken back by the reaper)"
        elif lease.deadline < now:
            error_class = "LeaseExpired"
            message = f"lease expired after {lease.lease_s:g}s without ack or heartbeat"
        else:
            return None
        return AttemptError(
            attempt=lease.attempt,
            at_ms=now_ms(self._clock),
            worker=lease.worker,
            error_class=error_class,
            message=message,
            traceback="",
        )

    # -- job types no worker runs ------------------------------------------

    def sweep_unhandled(self) -> int:
        """Ready jobs whose type no connected worker runs: note (durably) when that was
        first seen, and dead-letter those that waited past the grace; returns how many."""
        actions: list[CopyRequest] = []
        with self._cond:
            now = now_ms(self._clock)
            handled = self._workers.handled(now)
            if handled is None:
                return 0
            batch = self._store.batch()
            grace_ms = int(self._config.unknown_type_grace_s * 1000)
            overdue = {
                id(p)
                for p in self._ready
                if p.job.type not in handled
                and now - self._unhandled_since(p, now, batch) >= grace_ms
            }
            self._store.write(batch)
            for pending in self._ready.remove_if(lambda p: id(p) in overdue) if overdue else []:
                self._ready_bytes -= len(pending.envelope)
                actions.append(self._unknown_type_action(pending, handled, now))
            self._enqueue(actions)
        return len(actions)

    def _unhandled_since(self, pending: Pending, now: int, batch: StoreBatch) -> int:
        state = self._parts[pending.tp]
        since = state.unhandled_since.get(pending.offset)
        if since is None:
            since = state.unhandled_since[pending.offset] = now
            batch.unhandled(pending.tp.topic, pending.tp.partition, pending.offset, now)
        return since

    def _unknown_type_action(
        self, pending: Pending, handled: frozenset[str], now: int
    ) -> CopyRequest:
        job = pending.job
        message = (
            f"no connected worker runs job type {job.type!r} (waited "
            f"{self._config.unknown_type_grace_s:g}s; workers run: {', '.join(sorted(handled))})"
        )
        error = AttemptError(
            attempt=job.attempt,
            at_ms=now,
            worker="",
            error_class=UNKNOWN_JOB_TYPE,
            message=message,
            traceback="",
        )
        dead = replace(job, errors=(*job.errors, error))
        return self._dead_action(pending, dead, DeadLetterReason.UNKNOWN_JOB_TYPE.value, message)

    # -- the retry path -----------------------------------------------------

    def _failure_action(
        self, lease: Lease, error: AttemptError, *, permanent: bool, retry_after_s: float = 0.0
    ) -> CopyRequest:
        """Retry after a jittered delay (within the retry budget), or dead-letter."""
        pending = lease.pending
        # Attempts made so far include claims whose worker died before settling.
        job = replace(pending.job, attempt=lease.attempt, errors=(*pending.job.errors, error))
        policy = self._config.retries.for_job(job.type, job.max_attempts)
        decision = policy.decide(
            attempt=lease.attempt,
            error_class=error.error_class,
            permanent=permanent,
            retry_after_s=retry_after_s,
            previous_delay_s=_previous_delay_s(pending.job),
            rng=self._rng,
        )
        if not decision.retry:
            return self._dead_action(pending, job, decision.reason.value, error.message)
        delay_s = decision.delay_s + self._budget.admit_retry()
        run_at_ms = now_ms(self._clock) + int(delay_s * 1000)
        return self._retry_action(pending, replace(job, run_at_ms=run_at_ms), delay_s)

    def _retry_action(self, pending: Pending, job: Job, delay_s: float) -> CopyRequest:
        return CopyRequest(
            kind=CopyKind.RETRY,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            job=job,
            delay_s=delay_s,
        )

    def _dead_action(self, pending: Pending, job: Job, reason: str, detail: str) -> CopyRequest:
        return CopyRequest(
            kind=CopyKind.DEAD,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            job=job,
            reason=reason,
            detail=detail,
        )

    # -- the outbox's side of copies ------------------------------------------

    def copy(self, request: CopyRequest) -> None:
        """Queue a copy decided outside the engine (a hop, an undecodable record's dead
        letter), counted in flight like the engine's own."""
        with self._cond:
            self._enqueue([request])

    def _enqueue(self, requests: list[CopyRequest]) -> None:
        """Count each copy in flight for its partition and queue it (caller holds the lock)."""
        for request in requests:
            state = self._parts.get(request.source)
            counted = request.kind is not CopyKind.STATUS  # resolves nothing: never waited for
            if counted and state is not None and state.generation == request.generation:
                state.copies_in_flight += 1
            self._copies.append(request)

    def take_copies(self) -> list[CopyRequest]:
        """Copies queued since the last call, for the outbox to send."""
        with self._cond:
            taken, self._copies = self._copies, []
            return taken

    def is_current(self, request: CopyRequest) -> bool:
        """False once the copy's partition moved: the next owner runs the job again.
        A status record is always current: the job ended here whoever owns it now."""
        if request.kind is CopyKind.STATUS:
            return True
        with self._cond:
            state = self._parts.get(request.source)
            return state is not None and state.generation == request.generation

    def copy_delivered(self, request: CopyRequest, *, dead: bool = False) -> None:
        """The copy is durable: resolve its source offset (a dedupe claim lets its job run).
        ``dead``: the outbox sent a dead letter instead (the copy was too large)."""
        if request.kind is CopyKind.STATUS:
            return
        with self._cond:
            self._uncount(request)
            if request.kind is CopyKind.DEDUPE_CLAIM:
                self._claimed(request)
                return
            how = _RESOLUTIONS[request.kind]
            if dead:
                how = Resolution.DEAD
            self.resolve(request.source, request.offset, request.generation, how)
            if how is Resolution.DEAD and request.job is not None:
                reason = request.reason if request.kind is CopyKind.DEAD else "too large"
                self._enqueue(
                    [records.died(request, request.job, reason=reason, at_ms=now_ms(self._clock))]
                )

    def copy_dropped(self, request: CopyRequest) -> None:
        """The outbox gave up a copy whose partition moved: no longer in flight here."""
        with self._cond:
            self._uncount(request)
            self._awaiting_claim.pop(request.lease_id, None)

    def _uncount(self, request: CopyRequest) -> None:
        state = self._parts.get(request.source)
        if state is not None and state.generation == request.generation:
            state.copies_in_flight -= 1

    def _claimed(self, request: CopyRequest) -> None:
        waiting = self._awaiting_claim.pop(request.lease_id, None)
        if waiting is None:
            return
        pending, not_before_ms = waiting
        state = self._parts.get(pending.tp)
        if state is not None and state.generation == pending.generation:
            self._queue(pending, not_before_ms)

    def resolve(self, tp: TopicPart, offset: int, generation: int, how: Resolution) -> None:
        """Mark an offset finished once its fate is durable (ack stored or copy delivered)."""
        with self._cond:
            state = self._parts.get(tp)
            if state is None or state.generation != generation:
                return
            if how is Resolution.RETRIED:
                self.counters.retried += 1
            elif how is Resolution.DEAD:
                self.counters.dead += 1
            batch = self._store.batch()
            batch.resolve(tp.topic, tp.partition, offset, how)
            self._store.write(batch)
            state.tracker.resolve(offset)

    # -- committing ---------------------------------------------------------

    def commit_positions(
        self, only: set[TopicPart] | None = None
    ) -> dict[TopicPart, tuple[int, str]]:
        """Partitions whose commit (offset, or progress beyond it) changed since the last."""
        positions = {}
        with self._cond:
            for tp, state in self._parts.items():
                if (only is not None and tp not in only) or state.tracker.highest_fetched < 0:
                    continue
                offset = state.tracker.committable
                metadata = self._metadata(state, offset)
                if (offset, metadata) != (state.committed, state.committed_metadata):
                    positions[tp] = (offset, metadata)
        return positions

    def _metadata(self, state: PartitionState, offset: int) -> str:
        """Progress beyond ``offset``: what this owner resolved, and what it inherited
        (store or previous owner's metadata) but has not fetched again yet. Without the
        inherited part, the first commit after an assignment would erase it, and a
        second move would re-run every job acked beyond the commit."""
        resolved = state.tracker.resolved_beyond()
        resolved.update(o for o in state.resolved_before if o >= offset)
        progress = Progress(
            resolved=frozenset(resolved),
            claims={
                o: n for o, n in state.claims.items() if o >= offset and n > 0 and o not in resolved
            },
        )
        if not progress.resolved and not progress.claims:
            return ""
        return encode_progress(offset, progress, limit=state.metadata_limit)

    def shrink_metadata(self, tp: TopicPart) -> tuple[int, str] | None:
        """The broker refused ``tp``'s commit metadata as too large: the position to
        commit instead, with at most half as much metadata (none at the end). A move
        then re-runs more of the jobs finished beyond the commit, but the commit moves."""
        with self._cond:
            state = self._parts.get(tp)
            if state is None:
                return None
            offset = state.tracker.committable
            refused = len(self._metadata(state, offset))
            state.metadata_limit = min(state.metadata_limit, refused) // 2
            if state.metadata_limit < 64:
                state.metadata_limit = 0
            self._metadata_limit = min(self._metadata_limit, state.metadata_limit)
            log.warning(
                "the broker refused %d bytes of commit metadata for %s/%d; using at most %d "
                "(raise the broker's offset.metadata.max.bytes to 4096 to keep progress "
                "across partition moves)",
                refused,
                tp.topic,
                tp.partition,
                state.metadata_limit,
            )
            return offset, self._metadata(state, offset)

    def over_span(self) -> set[TopicPart]:
        """Partitions fetched so far beyond their commit that metadata could not describe."""
        with self._cond:
            return {
                tp
                for tp, state in self._parts.items()
                if state.tracker.highest_fetched - state.tracker.committable
                >= self._config.max_span - 1
            }

    def committed(self, positions: Mapping[TopicPart, tuple[int, str]]) -> None:
        """Kafka accepted these commits: the store can forget everything below them."""
        with self._cond:
            batch = self._store.batch()
            for tp, (offset, metadata) in positions.items():
                state = self._parts.get(tp)
                if state is None:
                    continue
                state.committed = max(state.committed, offset)
                state.committed_metadata = metadata
                batch.forget_below(tp.topic, tp.partition, offset)
                for old in [o for o in state.resolved_before if o < offset]:
                    del state.resolved_before[old]
                for old in [o for o in state.claims if o < offset]:
                    del state.claims[old]
                for old in [o for o in state.stored_leases if o < offset]:
                    del state.stored_leases[old]
                for old in [o for o in state.unhandled_since if o < offset]:
                    del state.unhandled_since[old]
            self._store.write(batch)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- inspection ---------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        with self._cond:
            now, mono = now_ms(self._clock), self._monotonic()
            return {
                "retry_budget": self._budget.snapshot().to_dict(),
                "partitions": [_partition_view(s, mono) for s in self._parts.values()],
                "ready": len(self._ready),
                "delayed": len(self._delayed),
                "next_delayed_due_ms": self._delayed[0][0] if self._delayed else None,
                "ready_bytes": self._ready_bytes,
                "ready_by_tenant": self._ready.tenants(),
                "in_flight_by_tenant": self._in_flight_by_tenant(),
                "counters": dict(vars(self.counters)),
                "settling_in": self._still_settling(),
                "workers": self._workers.snapshot(now),
            }

    def job_view(self, given: str) -> dict[str, object]:
        """Where one job is in this leasekeeper: for ``inspect job ID``. ``given`` is a
        job id or a unique prefix of one (8+ characters)."""
        with self._cond:
            in_hand = self._jobs_in_hand()
            overdue = now_ms(self._clock) - NOTE_OVERDUE_MS
            notes = {
                note.job_id: note
                for note in self._store.notes(given)
                if note.kind is not NoteKind.DELAYED or (note.due_ms or 0) >= overdue
            }
            try:
                job_id = resolve_prefix([*in_hand, *notes, *self.control.cancelled], given)
            except PrefixError as exc:
                return unknown_view(given, str(exc))
            if job_id is None:
                return unknown_view(given)
            cancellation = self.control.cancelled.get(job_id)
            if job_id in in_hand:
                if cancellation is not None:
                    return cancelled_view(job_id, cancellation)
                return in_hand[job_id]
            if job_id in notes:
                return note_view(notes[job_id], cancellation)
            assert cancellation is not None  # the only other source of candidates
            return cancel_recorded_view(job_id, cancellation)

    def _jobs_in_hand(self) -> dict[str, dict[str, object]]:
        """The view of every job in the window: leased, ready, or on the timer."""
        views: dict[str, dict[str, object]] = {}
        for state in self._parts.values():
            for lease in state.leases.values():
                job = lease.pending.job
                views[job.job_id] = _with_job(
                    base_view(job.job_id)
                    | {
                        "state": JobState.LEASED.value,
                        "worker": lease.worker,
                        "attempt": lease.attempt,
                        "lease_id": lease.pending.lease_id,
                        "until_ms": lease.until_ms,
                    },
                    job,
                )
        for pending in self._ready:
            views[pending.job.job_id] = _with_job(
                base_view(pending.job.job_id)
                | {"state": JobState.READY.value, "lease_id": pending.lease_id},
                pending.job,
            )
        for due, _, pending in self._delayed:
            views[pending.job.job_id] = _with_job(
                base_view(pending.job.job_id)
                | {"state": JobState.DELAYED.value, "due_ms": due, "lease_id": pending.lease_id},
                pending.job,
            )
        return views

    def _in_flight_by_tenant(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for state in self._parts.values():
            for lease in state.leases.values():
                tenant = lease.pending.job.tenant_id
                counts[tenant] = counts.get(tenant, 0) + 1
        return counts


def _refused(lease_id: str, reason: str) -> LeaseAnswer:
    return LeaseAnswer(lease_id=lease_id, ok=False, reason=reason)


def _job_type(pending: Pending) -> str:
    return pending.job.type


def _of_types(job_types: frozenset[str]) -> Callable[[Pending], bool] | None:
    if not job_types:
        return None
    return lambda pending: pending.job.type in job_types


def _partition_view(state: PartitionState, now: float) -> dict[str, object]:
    """``now`` is monotonic seconds."""
    return {
        "topic": state.tp.topic,
        "partition": state.tp.partition,
        "committed": state.committed,
        "highest_fetched": state.tracker.highest_fetched,
        "committable": state.tracker.committable,
        "unresolved": state.tracker.unresolved(),
        "unresolved_count": state.tracker.unresolved_count(),
        "leases": [
            {
                "lease_id": lease.pending.lease_id,
                "job_id": lease.pending.job.job_id,
                "type": lease.pending.job.type,
                "tenant": lease.pending.job.tenant_id,
                "worker": lease.worker,
                "attempt": lease.attempt,
                "age_s": round(now - lease.started_at, 3),
                "expires_in_s": round(lease.deadline - now, 3),
            }
            for lease in state.leases.values()
        ],
    }


def _previous_delay_s(job: Job) -> float | None:
    """The delay before this attempt (decorrelated jitter grows from it), if it had one."""
    if not job.errors or job.run_at_ms <= 0:
        return None
    delay_ms = job.run_at_ms - job.errors[-1].at_ms
    return delay_ms / 1000 if delay_ms > 0 else None


def _with_job(view: dict[str, object], job: Job) -> dict[str, object]:
    view.update(
        type=job.type,
        tenant=job.tenant_id,
        run_at_ms=job.run_at_ms,
        max_attempts=job.max_attempts,
        errors=[
            {"attempt": e.attempt, "error_class": e.error_class, "message": e.message}
            for e in job.errors
        ],
    )
    return view


def _record(lease: Lease) -> LeaseRecord:
    return LeaseRecord(
        token=lease.token,
        worker=lease.worker,
        attempt=lease.attempt,
        started_ms=lease.started_ms,
        until_ms=lease.until_ms,
    )


def _crash_note(job: Job) -> str:
    return (
        f"claimed {job.max_attempts} times without a settlement "
        "(the worker died or lost its lease each time)"
    )
