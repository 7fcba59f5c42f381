"""The engine seen from outside: ``inspect``, metrics and ``inspect job ID``.

Read-only views of the window, the partition book and the counters, taken under
the engine's lock and turned into plain data here, so nothing outside holds a
reference into the engine's state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace

from leasekeeper.core.clocks import now_ms as wall_ms
from leasekeeper.core.context import Counters
from leasekeeper.core.control_state import ControlState
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.job_records import NOTE_OVERDUE_MS
from leasekeeper.core.lease_core import LeaseCore
from leasekeeper.core.leases import Lease, Pending
from leasekeeper.core.partition_book import PartitionBook, PartitionState
from leasekeeper.core.retry_budget import RetryBudget
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.store_values import NoteKind
from leasekeeper.core.unhandled import UnhandledSweep
from leasekeeper.core.window import ReadyWindow
from leasekeeper.fairness.view import FairnessSnapshot, fairness_snapshot
from leasekeeper.fairness.weighted import TenantPolicy
from leasekeeper.views.id_prefix import PrefixError, resolve_prefix
from leasekeeper.views.job_view import (
    InspectState,
    base_view,
    cancel_recorded_view,
    cancelled_view,
    note_view,
    unknown_view,
)
from leasekeeper.views.snapshots import EngineSnapshot, LeaseView, PartitionView
from schemas.job_headers import JobHead


class ViewPort:
    """What ``inspect``, the metrics and the dashboard read of the engine, each under
    the engine's lock."""

    def __init__(
        self,
        *,
        lock: threading.RLock,
        class_weights: Mapping[str, int],
        tenants: TenantPolicy,
        book: PartitionBook,
        window: ReadyWindow,
        core: LeaseCore,
        budget: RetryBudget,
        counters: Counters,
        unhandled: UnhandledSweep,
        control: ControlState,
        store: LeaseStore,
        reader: JobReader,
        overflow: Callable[[], Mapping[str, int]],
        clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        """``overflow``: per tenant, its jobs in the overflow lane."""
        self._lock = lock
        self._class_weights = class_weights
        self._tenants = tenants
        self._book = book
        self._window = window
        self._core = core
        self._budget = budget
        self._counters = counters
        self._unhandled = unhandled
        self._control = control
        self._store = store
        self._reader = reader
        self._overflow = overflow
        self._clock = clock
        self._monotonic = monotonic

    def snapshot(self) -> EngineSnapshot:
        with self._lock:
            return snapshot(book=self._book, window=self._window, budget=self._budget,
                            counters=self._counters, settling_in=self._core.lookup.settling(),
                            unhandled=self._unhandled, now_ms=wall_ms(self._clock),
                            mono=self._monotonic())  # fmt: skip

    def fairness(self) -> FairnessSnapshot:
        """Per priority class and per tenant: what ``inspect`` and the metrics show."""
        with self._lock:
            return fairness_snapshot(class_weights=self._class_weights, tenants=self._tenants,
                                     window=self._window,
                                     book=self._book, now_ms=wall_ms(self._clock),
                                     overflow=self._overflow())  # fmt: skip

    def job_view(self, given: str) -> dict[str, object]:
        """Where one job is in this leasekeeper: for ``inspect job ID``. ``given`` is a
        job id or a unique prefix of one (8+ characters)."""
        with self._lock:
            return job_view(given, book=self._book, window=self._window,
                            control=self._control, store=self._store,
                            now_ms=wall_ms(self._clock), reader=self._reader)  # fmt: skip


def snapshot(
    *,
    book: PartitionBook,
    window: ReadyWindow,
    budget: RetryBudget,
    counters: Counters,
    settling_in: bool,
    unhandled: UnhandledSweep,
    now_ms: int,
    mono: float,
) -> EngineSnapshot:
    """``mono`` is monotonic seconds now (lease ages and expiries); ``now_ms`` epoch ms."""
    return EngineSnapshot(
        retry_budget=budget.snapshot(),
        partitions=tuple(_partition_view(s, mono) for s in book.parts.values()),
        ready=window.ready_count,
        delayed=window.delayed_count,
        next_delayed_due_ms=window.next_due_ms,
        ready_bytes=window.bytes,
        ready_by_tenant=window.ready_by_tenant(),
        in_flight_by_tenant=_in_flight_by_tenant(book),
        counters=replace(counters),
        settling_in=settling_in,
        workers=unhandled.workers.snapshot(now_ms),
        unhandled=unhandled.waits,
    )


def job_view(
    given: str,
    *,
    book: PartitionBook,
    window: ReadyWindow,
    control: ControlState,
    store: LeaseStore,
    now_ms: int,
    reader: JobReader | None = None,
) -> dict[str, object]:
    """Where one job is in this leasekeeper: for ``inspect job ID``. ``given`` is a job
    id or a unique prefix of one; the job is looked for in hand (leased, ready, on the
    timer), then in the notes by id, then among the cancellations. Only the job shown
    is decoded (by ``reader``), for its error history."""
    in_hand = _jobs_in_hand(book, window)
    overdue = now_ms - NOTE_OVERDUE_MS
    notes = {
        note.job_id: note
        for note in store.notes(given)
        if note.kind is not NoteKind.DELAYED or (note.due_ms or 0) >= overdue
    }
    try:
        job_id = resolve_prefix([*in_hand, *notes, *control.cancelled], given)
    except PrefixError as exc:
        return unknown_view(given, str(exc))
    if job_id is None:
        return unknown_view(given)
    cancellation = control.cancelled.get(job_id)
    if job_id in in_hand:
        if cancellation is not None:
            return cancelled_view(job_id, cancellation)
        view, pending = in_hand[job_id]
        return _with_errors(view, pending, reader or JobReader())
    if job_id in notes:
        return note_view(notes[job_id], cancellation)
    assert cancellation is not None  # the only other source of candidates
    return cancel_recorded_view(job_id, cancellation)


def _jobs_in_hand(
    book: PartitionBook, window: ReadyWindow
) -> dict[str, tuple[dict[str, object], Pending]]:
    """The view of every job in the window (leased, ready, or on the timer), without
    its error history, and the job."""
    views: dict[str, tuple[dict[str, object], Pending]] = {}
    for state in book.parts.values():
        for lease in state.leases.values():
            job = lease.pending.job
            leased = {
                "state": InspectState.LEASED.value,
                "worker": lease.worker,
                "attempt": lease.attempt,
                "lease_id": lease.pending.lease_id,
                "until_ms": lease.until_ms,
            }
            if lease.progress is not None:
                leased.update(lease.progress.fields())
            views[job.job_id] = (_with_job(base_view(job.job_id) | leased, job), lease.pending)
    for pending in window.ready():
        ready = {"state": InspectState.READY.value, "lease_id": pending.lease_id}
        view = _with_job(base_view(pending.job.job_id) | ready, pending.job)
        views[pending.job.job_id] = (view, pending)
    for due, pending in window.delayed():
        delayed = {"state": InspectState.DELAYED.value, "due_ms": due, "lease_id": pending.lease_id}
        view = _with_job(base_view(pending.job.job_id) | delayed, pending.job)
        views[pending.job.job_id] = (view, pending)
    return views


def _in_flight_by_tenant(book: PartitionBook) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in book.parts.values():
        for lease in state.leases.values():
            tenant = lease.pending.job.tenant_id
            counts[tenant] = counts.get(tenant, 0) + 1
    return counts


def _partition_view(state: PartitionState, now: float) -> PartitionView:
    """``now`` is monotonic seconds."""
    return PartitionView(
        topic=state.tp.topic,
        partition=state.tp.partition,
        committed=state.committed,
        highest_fetched=state.tracker.highest_fetched,
        committable=state.tracker.committable,
        unresolved=state.tracker.unresolved(),
        unresolved_count=state.tracker.unresolved_count(),
        uncommitted=state.tracker.resolutions - state.durable_resolutions,
        leases=tuple(_lease_view(lease, now) for lease in state.leases.values()),
    )


def _lease_view(lease: Lease, now: float) -> LeaseView:
    """``now`` is monotonic seconds."""
    progress = lease.progress
    return LeaseView(
        lease_id=lease.pending.lease_id,
        job_id=lease.pending.job.job_id,
        type=lease.pending.job.type,
        tenant=lease.pending.job.tenant_id,
        worker=lease.worker,
        attempt=lease.attempt,
        age_s=round(now - lease.started_at, 3),
        expires_in_s=round(lease.deadline - now, 3),
        started=lease.started,
        progress=None if progress is None else progress.fraction,
        progress_message=progress.message or None if progress is not None else None,
    )


def _with_job(view: dict[str, object], job: JobHead) -> dict[str, object]:
    view.update(
        type=job.type, tenant=job.tenant_id, run_at_ms=job.run_at_ms, max_attempts=job.max_attempts
    )
    return view


def _with_errors(view: dict[str, object], pending: Pending, reader: JobReader) -> dict[str, object]:
    """The job's error history, from its envelope (the one decode ``inspect job`` costs)."""
    try:
        errors = reader.full(pending).errors
    except Exception as exc:  # DecodeError, or the registry's SchemaUnavailable
        view["errors_unreadable"] = f"{type(exc).__name__}: {exc}"
        errors = ()
    view["errors"] = [
        {"attempt": e.attempt, "error_class": e.error_class, "message": e.message} for e in errors
    ]
    return view
