"""What the engine records about how a job ended or where it waits (pure values).

Two kinds: status records for ``jobs.Q.status`` (succeeded, dead, cancelled,
skipped as a duplicate), sent by the outbox as ``STATUS`` copies that resolve
nothing, so an offset never waits for them; and notes by job id in the RocksDB
store (delayed, skipped as a duplicate, cancelled) for ``inspect job``. Kept apart
from the engine so that it only decides when to write them.
"""

from __future__ import annotations

from jobcore.control import CancelledHow, JobEnd, JobStatus
from jobcore.progress import JobProgress
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Lease, Pending, TopicPart
from leasekeeper.core.store_values import JobNote, NoteKind
from schemas.job import Job
from schemas.job_headers import JobHead

# Notes by job id are pruned this often, and a delayed job's note once it is this far
# past due (it was dispatched, hopped, or moved with its partition).
NOTE_PRUNE_INTERVAL_S = 3600.0
NOTE_OVERDUE_MS = 60_000


def ended(
    pending: Pending,
    end: JobEnd,
    *,
    attempt: int,
    at_ms: int,
    how: CancelledHow | None = None,
    worker: str = "",
    run_s: float = 0.0,
    duplicate_of: str = "",
    progress: JobProgress | None = None,
) -> CopyRequest:
    """The status record of a job in hand that ended ``end`` (run by ``worker``, its
    handler running ``run_s`` by the worker's own clock; 0: not reported), or was
    skipped as a duplicate of ``duplicate_of``; ``progress`` the lease's last."""
    status = JobStatus(job_id=pending.job.job_id, state=end, at_ms=at_ms, attempt=attempt,
                       reason=how.value if how else "", worker=worker,
                       duration_s=_reported(run_s), duplicate_of=duplicate_of,
                       record=pending.lease_id, progress=progress)  # fmt: skip
    return CopyRequest(kind=CopyKind.STATUS, source=pending.tp, offset=pending.offset,
                       generation=pending.generation, status=status)  # fmt: skip


def succeeded(lease: Lease, *, at_ms: int, run_s: float) -> JobStatus:
    """The status record of a job acked by the lease's worker, with the last progress
    it reported: a bare value, since one is made for every job (``ended`` wraps the
    rarer ends in a CopyRequest)."""
    pending = lease.pending
    return JobStatus(job_id=pending.job.job_id, state=JobEnd.SUCCEEDED, at_ms=at_ms,
                     attempt=lease.attempt, worker=lease.worker,
                     duration_s=run_s if run_s > 0 else None, record=pending.lease_id,
                     progress=lease.progress)  # fmt: skip


def died(request: CopyRequest, job: Job, *, reason: str, at_ms: int) -> CopyRequest:
    """The status record of a job whose dead letter ``request`` was delivered."""
    last = job.errors[-1] if job.errors else None
    error = f"{last.error_class}: {last.message}" if last else ""
    status = JobStatus(job_id=job.job_id, state=JobEnd.DEAD, at_ms=at_ms, attempt=job.attempt,
                       reason=reason, worker=last.worker if last else "",
                       last_error=error, duration_s=_reported(request.run_s),
                       record=_record_of(request), progress=request.progress)  # fmt: skip
    return CopyRequest(kind=CopyKind.STATUS, source=request.source, offset=request.offset,
                       generation=request.generation, status=status)  # fmt: skip


def _record_of(request: CopyRequest) -> str:
    """The lease id of the record a copy was made from (none for a copy of no record)."""
    return request.source.lease_id(request.offset) if request.offset >= 0 else ""


def _reported(run_s: float) -> float | None:
    """A worker that reported no run time (0) leaves the duration unknown, not zero."""
    return run_s if run_s > 0 else None


def cancelled_in_tier(note: JobNote, *, at_ms: int) -> CopyRequest:
    """The status record of a cancelled job noted in a held tier: it will be skipped."""
    status = JobStatus(job_id=note.job_id, state=JobEnd.CANCELLED, at_ms=at_ms, attempt=0,
                       reason=CancelledHow.WAITING.value)  # fmt: skip
    source = TopicPart(note.topic, note.partition)
    return CopyRequest(kind=CopyKind.STATUS, source=source, offset=note.offset, generation=0,
                       status=status)  # fmt: skip


def skip_note(
    pending: Pending, kind: NoteKind, *, seen_ms: int, original: str | None = None
) -> JobNote:
    """A job resolved without running (cancelled, or a duplicate of ``original``)."""
    return JobNote(job_id=pending.job.job_id, kind=kind, topic=pending.tp.topic,
                   partition=pending.tp.partition, offset=pending.offset, seen_ms=seen_ms,
                   duplicate_of=original)  # fmt: skip


def delayed_note(tp: TopicPart, offset: int, job: JobHead, *, seen_ms: int) -> JobNote:
    """A delay-tier record seen and left in Kafka until due."""
    return JobNote(job_id=job.job_id, kind=NoteKind.DELAYED, topic=tp.topic,
                   partition=tp.partition, offset=offset, seen_ms=seen_ms,
                   due_ms=job.run_at_ms)  # fmt: skip
