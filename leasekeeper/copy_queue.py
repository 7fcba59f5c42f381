"""Copies the engine decided and the outbox has not taken yet.

Any thread (RPC or Kafka loop) appends under the engine's lock; the outbox takes
them on the Kafka loop's thread. Every copy counts as in flight for its partition
from the moment it is decided until it is delivered or dropped, so a partition
is not let go (nor its commit moved) while a copy of one of its jobs is unsent.
"""

from __future__ import annotations

from jobcore.control import JobStatus
from leasekeeper import job_records as records
from leasekeeper.copies import CopyKind, CopyRequest
from leasekeeper.partition_book import PartitionBook
from leasekeeper.store import Resolution
from schemas.job import Job
from schemas.vocabulary import DeadLetterReason

# What a delivered copy makes of its source offset.
_RESOLUTIONS = {
    CopyKind.RETRY: Resolution.RETRIED,
    CopyKind.HOP: Resolution.HOPPED,
    CopyKind.PARK: Resolution.PARKED,
    CopyKind.DEAD: Resolution.DEAD,
    CopyKind.DEAD_RAW: Resolution.DEAD,
    CopyKind.OVERFLOW: Resolution.OVERFLOWED,
}


class CopyQueue:
    def __init__(self, *, book: PartitionBook, status_records: bool = True) -> None:
        self._book = book
        self._copies: list[CopyRequest] = []
        # Status records wait apart, as bare values: one is written for every job
        # that ends, so a succeeded job's costs no CopyRequest (see status_sender).
        self._statuses: list[JobStatus] = []
        # Off (``--no-status``): status records are dropped here, the one door every
        # one passes, so no path of the engine can write one.
        self._status_records = status_records

    def add(self, requests: list[CopyRequest]) -> None:
        for request in requests:
            if request.kind is CopyKind.STATUS:
                if request.status is not None:
                    self.add_status(request.status)
                continue
            self._book.count_copy(request, 1)
            self._copies.append(request)

    def add_status(self, status: JobStatus) -> None:
        """How a job ended, for ``jobs.Q.status``; resolves nothing, nothing waits for it."""
        if self._status_records:
            self._statuses.append(status)

    def take(self) -> list[CopyRequest]:
        taken, self._copies = self._copies, []
        return taken

    def take_statuses(self) -> list[JobStatus]:
        taken, self._statuses = self._statuses, []
        return taken

    def done(self, request: CopyRequest) -> None:
        """Delivered or dropped: no longer in flight for its partition."""
        if _counted(request):
            self._book.count_copy(request, -1)


def _counted(request: CopyRequest) -> bool:
    """A status record resolves nothing: nothing ever waits for it."""
    return request.kind is not CopyKind.STATUS


def resolution_of(request: CopyRequest) -> Resolution:
    """What the delivery of ``request`` makes of its source offset."""
    return _RESOLUTIONS[request.kind]


def dead_status(request: CopyRequest, job: Job, at_ms: int) -> CopyRequest:
    """The status record of a dead-lettered job (a retry or hop too large dies as such)."""
    reason = request.reason if request.kind is CopyKind.DEAD else None
    reason = reason or DeadLetterReason.TOO_LARGE
    return records.died(request, job, reason=reason.value, at_ms=at_ms)
