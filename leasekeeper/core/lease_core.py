"""The lease core: claim, heartbeat, settle, expire.

Invariants held here: every claim mints a new token, and heartbeat, ack and
nack must present it (``LeaseLookup`` refuses a stale one and counts it: "lease
tokens fence zombies"); attempts are counted at claim time and written to the store before
the job is handed out ("attempts are counted at claim time"); an ack is stored
before it is answered; a nack, an expired lease or a job past its timeout
becomes a copy (``FailurePath``) and resolves only once the copy is durable.
After a restart, leases not known yet are answered "retry later" while the
leasekeeper settles in (``LeaseLookup`` too). Features take part through
``DispatchGate`` (core/hooks). The engine's lock guards it; it returns the copies
it decided, the engine queues them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from jobcore.control import CancelledHow, JobEnd
from jobcore.progress import JobProgress
from leasekeeper.core import job_records as records
from leasekeeper.core.clocks import now_ms
from leasekeeper.core.context import EngineContext
from leasekeeper.core.copies import CopyRequest, cap_error
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.hooks import DispatchGate, LeaseEnd, Lines
from leasekeeper.core.intake import Intake
from leasekeeper.core.lease_lookup import LeaseLookup
from leasekeeper.core.leases import (
    Grant,
    Lease,
    Pending,
    SettleKind,
    Settlement,
    mark_started,
    mint_token,
)
from leasekeeper.core.partition_book import PartitionBook, PartitionState
from leasekeeper.core.results import ResultPath
from leasekeeper.core.retry_budget import RetryBudget
from leasekeeper.core.retry_path import FailurePath
from leasekeeper.core.started_only import StartedOnly
from leasekeeper.core.store import StoreBatch
from leasekeeper.core.store_values import NoteKind, Resolution, leased_value
from leasekeeper.core.window import ReadyWindow
from schemas.job import AttemptError
from schemas.lease_answer import LeaseAnswer
from schemas.vocabulary import ErrorClass


class LeaseCore:
    def __init__(
        self,
        *,
        ctx: EngineContext,
        book: PartitionBook,
        window: ReadyWindow,
        intake: Intake,
        failures: FailurePath,
        budget: RetryBudget,
        copies: CopyQueue,
        gates: Sequence[DispatchGate],
        ordering: Lines,
    ) -> None:
        self._ordering = ordering
        self._copies = copies
        self._gates = tuple(gates)
        self._book = book
        self._window = window
        self._intake = intake
        self._failures = failures
        self._budget = budget
        self._store = ctx.store
        self._control = ctx.control
        self._counters = ctx.counters
        self._config = ctx.config
        self._clock = ctx.clock
        self._resolved = ctx.resolved
        self._monotonic = ctx.monotonic
        self.lookup = LeaseLookup(book, ctx.counters, ctx.monotonic, ctx.config.settle_in_max_s)
        self._started_only = StartedOnly()
        self._results = ResultPath(limit=ctx.config.max_result_bytes, queue=ctx.config.queue,
                                   status_records=ctx.config.status_records)  # fmt: skip
        copies.remember_results(ctx.resolved, lambda: now_ms(ctx.clock))

    # -- claiming -------------------------------------------------------------

    def lease_ready(
        self,
        worker: str,
        max_jobs: int,
        accept: Callable[[Pending], bool] | None,
        *,
        reports_started: bool = False,
        start_now: int = 0,
        max_bytes: int = 0,
        size: Callable[[Pending], int] | None = None,
    ) -> tuple[list[Grant], list[CopyRequest]]:
        """Lease up to ``max_jobs`` ready jobs that ``accept`` takes; attempts are counted
        in the store before the grants leave. A worker that ``reports_started`` gets
        leases that count as started only once it says so (see ``started_only``),
        but for the first ``start_now``: its idle handlers start those at once. A job
        that would take the answer past ``max_bytes`` (but a first), by the ``size`` the
        RPC front gives its encoding, stays ready."""
        grants: list[Grant] = []
        actions: list[CopyRequest] = []
        batch = self._store.batch()
        tenants = self._config.tenants  # running jobs counted only when a cap is set
        running: Counter[str] = self._book.running_by_tenant() if tenants.capped else Counter()
        skip = {t for t, n in running.items() if tenants.at_cap(t, n)}
        for gate in self._gates:  # e.g. jobs over a rate limit wait
            accept = gate.narrow(accept)
        room = max_bytes
        while len(grants) < max_jobs:
            pending = self._window.pop(accept, skip)
            if pending is None:
                break
            encoded = size(pending) if size is not None and max_bytes > 0 else 0
            if grants and encoded > room:
                self._window.push_front(pending)  # the answer is full: first for the next
                break
            started = not reports_started or len(grants) < start_now
            grant = self._lease(pending, worker, batch, actions, started=started)
            if grant is not None:
                room -= encoded
                grants.append(grant)
                for gate in self._gates:
                    gate.granted(pending)
                tenant = pending.job.tenant_id
                running[tenant] += 1
                if tenants.at_cap(tenant, running[tenant]):
                    skip.add(tenant)
        self._store.write(batch)
        return grants, actions

    def _lease(
        self,
        pending: Pending,
        worker: str,
        batch: StoreBatch,
        actions: list[CopyRequest],
        *,
        started: bool,
    ) -> Grant | None:
        state = self._book.live(pending)
        if state is None:
            return None  # moved
        if self._intake.skipped(state, pending):
            self._ordering.finished(pending)  # cancelled while it waited
            return None
        job = pending.job
        prior = state.claims.get(pending.offset, 0)
        if job.attempt + prior >= job.max_attempts:
            actions.append(self._failures.crashed(pending))
            return None
        for gate in self._gates:  # e.g. its type's breaker is open: parked, no attempt
            taken = gate.admit(pending)
            if taken is not None:
                actions.append(taken)
                return None
        if job.attempt == 0 and prior == 0:
            self._budget.record_first_attempt()
        state.claims[pending.offset] = prior + 1
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
            started=started,
        )
        state.leases[pending.offset] = lease
        # The claim and the lease in one value, written before the grant leaves.
        self._store_lease(batch, state, lease)
        return Grant(
            lease_id=pending.lease_id,
            token=lease.token,
            until_ms=lease.until_ms,
            attempt=lease.attempt,
            lease_s=lease_s,
            envelope=pending.envelope,
            job=job,
            payload=job.payload(pending.envelope),
        )

    @staticmethod
    def _store_lease(batch: StoreBatch, state: PartitionState, lease: Lease) -> None:
        offset = lease.pending.offset
        value = leased_value(state.claims.get(offset, 0), lease.token, lease.worker, lease.attempt,
                             lease.started_ms, lease.until_ms, lease.started)  # fmt: skip
        batch.lease(state.tp.topic, state.tp.partition, offset, value)

    @staticmethod
    def _store_ended(batch: StoreBatch, state: PartitionState, offset: int) -> None:
        """The lease ended unresolved (a nack's or an expiry's copy is on its way): the
        claims stay, so a restart still counts them."""
        batch.claims(state.tp.topic, state.tp.partition, offset, state.claims.get(offset, 0))

    # -- heartbeats -------------------------------------------------------------

    def heartbeat(
        self,
        leases: list[tuple[str, str]],
        started: frozenset[str] = frozenset(),
        progress: Mapping[str, JobProgress] | None = None,
    ) -> list[LeaseAnswer]:
        """Extend each lease whose token is current; those in ``started`` (lease ids) have
        started, their attempt spent from now on; a lease holds its latest ``progress``."""
        answers = []
        now = now_ms(self._clock)
        batch = self._store.batch()
        for lease_id, token in leases:
            found = self.lookup.find(lease_id, token)
            if isinstance(found, LeaseAnswer):
                answers.append(self.lookup.refusal(found))
                continue
            state, lease = found
            if self._end_if_cancelled(state, lease, batch):
                answers.append(LeaseAnswer(lease_id=lease_id, ok=False, reason="cancelled"))
                continue
            if not lease.started and lease_id in started:
                mark_started(lease, now, self._monotonic())
            if progress and lease_id in progress:
                lease.progress = progress[lease_id]
            lease.until_ms = now + int(lease.lease_s * 1000)
            lease.deadline = self._monotonic() + lease.lease_s
            self._store_lease(batch, state, lease)
            answers.append(LeaseAnswer(lease_id=lease_id, ok=True, until_ms=lease.until_ms))
        self._store.write(batch)
        return answers

    def _end_if_cancelled(self, state: PartitionState, lease: Lease, batch: StoreBatch) -> bool:
        """A running job that was cancelled loses its lease and is never run again."""
        if not self._control.is_cancelled(lease.pending.job.job_id):
            return False
        offset = lease.pending.offset
        del state.leases[offset]
        batch.resolve(state.tp.topic, state.tp.partition, offset, Resolution.SKIPPED)
        at = now_ms(self._clock)
        batch.note(records.skip_note(lease.pending, NoteKind.CANCELLED_RUNNING, seen_ms=at))
        ended = records.ended(lease.pending, JobEnd.CANCELLED, attempt=lease.attempt, at_ms=at,
                              how=CancelledHow.RUNNING, progress=lease.progress)  # fmt: skip
        self._copies.add([ended])
        state.tracker.resolve(offset)
        self._counters.cancelled += 1
        self._ordering.finished(lease.pending)
        return True

    # -- settlements ------------------------------------------------------------

    def settle(self, settlements: list[Settlement]) -> tuple[list[LeaseAnswer], list[CopyRequest]]:
        """Acks are persisted before the answer; nacks become copies, resolved once durable."""
        answers: list[LeaseAnswer] = []
        actions: list[CopyRequest] = []
        batch = self._store.batch()
        for item in settlements:
            found = self.lookup.find(item.lease_id, item.token)
            if isinstance(found, LeaseAnswer):
                answers.append(self.lookup.refused_settlement(item, found))
                continue
            state, lease = found
            self.lookup.remember_settled(item.lease_id, item.token)
            del state.leases[lease.pending.offset]
            if item.outcome is not SettleKind.RELEASE:
                self._window.settled(lease.pending.job.tenant_id, item.run_s)
            self._apply(state, lease, item, batch, actions)
            answers.append(LeaseAnswer(lease_id=item.lease_id, ok=True))
        self._store.write(batch)
        return answers, actions

    def _apply(
        self,
        state: PartitionState,
        lease: Lease,
        item: Settlement,
        batch: StoreBatch,
        actions: list[CopyRequest],
    ) -> None:
        pending = lease.pending
        lease.progress = item.progress or lease.progress  # the last one, if no beat took it
        if item.result:  # over this leasekeeper's cap: a permanent nack saying so
            item = self._results.checked(item, pending.job.type)
        if item.outcome is SettleKind.ACK:
            self._counters.acked += 1
            self._ended(lease, LeaseEnd.ACKED, item)
            status = None
            if self._config.status_records:  # the hot path: not even built when off
                status = records.succeeded(lease, at_ms=now_ms(self._clock), run_s=item.run_s)
            if item.result:  # resolved (and its status sent) once its record is durable
                self._store_ended(batch, state, pending.offset)
                actions.append(self._results.copy(lease, item, status))
            else:
                self._resolved.ended(pending.job.job_id, now_ms(self._clock))
                batch.acked(pending.tp.topic, pending.tp.partition, pending.offset, lease.token)
                if status is not None:
                    self._copies.add_status(status)
                state.tracker.resolve(pending.offset)
            self._ordering.finished(pending)
        elif item.outcome is SettleKind.RELEASE:  # not run: the attempt is given back
            self._counters.released += 1
            self._ended(lease, LeaseEnd.RELEASED, item)
            count = max(0, state.claims.get(pending.offset, 1) - 1)
            state.claims[pending.offset] = count
            batch.claims(pending.tp.topic, pending.tp.partition, pending.offset, count)
            self._window.push_front(pending)
        else:
            self._counters.nacked += 1
            self._store_ended(batch, state, pending.offset)
            self._ended(lease, LeaseEnd.FAILED, item)
            actions.append(self._nacked(lease, item))

    def _nacked(self, lease: Lease, item: Settlement) -> CopyRequest:
        error = cap_error(
            AttemptError(
                attempt=lease.attempt,
                at_ms=now_ms(self._clock),
                worker=lease.worker,
                error_class=item.error_class or ErrorClass.ERROR.value,
                message=item.message,
                traceback=item.traceback,
            )
        )
        request = self._failures.failed(
            lease, error, permanent=item.permanent, retry_after_s=item.retry_after_s
        )
        # Kept for the status record if this attempt turns out to be the last.
        return replace(request, run_s=item.run_s, progress=lease.progress)

    # -- the reaper ---------------------------------------------------------------

    def expire(self) -> list[CopyRequest]:
        """Leases past ``until`` count as failed attempts (worker presumed dead), and so
        do jobs running past their timeout."""
        actions: list[CopyRequest] = []
        now = self._monotonic()
        batch = self._store.batch()
        for state in self._book.parts.values():
            for offset, lease in list(state.leases.items()):
                error = self._failures.overdue(lease, now)
                if error is None:
                    continue
                del state.leases[offset]
                self._store_ended(batch, state, offset)
                self._counters.expired += 1
                if self._refund(state, lease, batch):
                    continue
                self._ended(lease, LeaseEnd.EXPIRED, None)
                actions.append(self._failures.failed(lease, error, permanent=False))
        self._store.write(batch)
        return actions

    def _refund(self, state: PartitionState, lease: Lease, batch: StoreBatch) -> bool:
        """Give the attempt back to an expired job that never started (within the
        bound of ``StartedOnly``) and put it at the front; False when it is spent."""
        offset = lease.pending.offset
        refunded = state.refunds.get(offset, 0)
        if not self._started_only.refunds(lease, refunded):
            return False
        tp = state.tp
        count = max(0, state.claims.get(offset, 1) - 1)
        state.claims[offset] = count
        state.refunds[offset] = refunded + 1
        batch.claims(tp.topic, tp.partition, offset, count)
        batch.refunds(tp.topic, tp.partition, offset, refunded + 1)
        self._counters.refunded += 1
        self._ended(lease, LeaseEnd.RELEASED, None)
        self._window.push_front(lease.pending)
        return True

    def _ended(self, lease: Lease, end: LeaseEnd, item: Settlement | None) -> None:
        for gate in self._gates:
            gate.ended(lease, end, item)
