"""The engine seen from outside: ``inspect``, metrics and ``inspect job ID``.

Read-only views of the window, the partition book and the counters, taken under
the engine's lock and turned into plain data here, so nothing outside holds a
reference into the engine's state.
"""

from __future__ import annotations

from dataclasses import replace

from leasekeeper.control_state import ControlState
from leasekeeper.engine_config import Counters
from leasekeeper.partition_book import PartitionBook, PartitionState
from leasekeeper.retry_budget import RetryBudget
from leasekeeper.snapshots import EngineSnapshot, LeaseView, PartitionView
from leasekeeper.window import ReadyWindow
from schemas.job import Job


def snapshot(
    *,
    book: PartitionBook,
    window: ReadyWindow,
    budget: RetryBudget,
    counters: Counters,
    settling_in: bool,
    workers: dict[str, list[str]],
    mono: float,
) -> EngineSnapshot:
    """``mono`` is monotonic seconds now (lease ages and expiries)."""
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
        workers=workers,
    )


def job_view(
    job_id: str, *, book: PartitionBook, window: ReadyWindow, control: ControlState
) -> dict[str, object]:
    """Where one job is in this leasekeeper: for ``inspect job ID``."""
    view: dict[str, object] = {"job_id": job_id, "member_knows": True}
    cancellation = control.cancelled.get(job_id)
    if cancellation is not None:
        view.update(state="cancelled", cancelled_at_ms=cancellation.cancelled_at_ms,
                    reason=cancellation.reason)  # fmt: skip
        return view
    for state in book.parts.values():
        for lease in state.leases.values():
            if lease.pending.job.job_id == job_id:
                view.update(
                    state="leased",
                    worker=lease.worker,
                    attempt=lease.attempt,
                    lease_id=lease.pending.lease_id,
                    until_ms=lease.until_ms,
                )
                return _with_job(view, lease.pending.job)
    for pending in window.ready():
        if pending.job.job_id == job_id:
            view.update(state="ready", lease_id=pending.lease_id)
            return _with_job(view, pending.job)
    for due, pending in window.delayed():
        if pending.job.job_id == job_id:
            view.update(state="delayed", due_ms=due, lease_id=pending.lease_id)
            return _with_job(view, pending.job)
    view.update(state="unknown", member_knows=False)
    return view


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
        leases=tuple(
            LeaseView(
                lease_id=lease.pending.lease_id,
                job_id=lease.pending.job.job_id,
                type=lease.pending.job.type,
                tenant=lease.pending.job.tenant_id,
                worker=lease.worker,
                attempt=lease.attempt,
                age_s=round(now - lease.started_at, 3),
                expires_in_s=round(lease.deadline - now, 3),
            )
            for lease in state.leases.values()
        ),
    )


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
