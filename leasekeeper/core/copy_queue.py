"""Copies the engine decided and the outbox has not taken yet.

Any thread (RPC or Kafka loop) appends under the engine's lock; the outbox takes
them on the Kafka loop's thread. Every copy counts as in flight for its partition
from the moment it is decided until it is delivered or dropped, so a partition
is not let go (nor its commit moved) while a copy of one of its jobs is unsent.

A copy held for its envelope's schema (``CopyKind.HELD``: the registry is down and
the schema is not cached) waits here, counted in flight, its offset unresolved.
Each ``take`` past the backoff builds the held copies again (``again``, under the
engine's lock, like the first time), oldest first; the first that still cannot
have its schema ends the pass and doubles the backoff (up to ``HELD_MAX_S``): the
registry is down for all of them, and asking once per copy would only wait out its
timeout once per copy. So a registry outage delays the retries, dead letters and
parks of the jobs it touches; it never turns them into raw dead letters.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from jobcore.control import JobStatus
from leasekeeper.core import job_records as records
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.resolved_ids import ResolvedIds
from leasekeeper.core.store_values import Resolution
from schemas.job import Job
from schemas.vocabulary import DeadLetterReason

log = logging.getLogger(__name__)

# Held copies are built again after HELD_RETRY_S, doubling while the registry stays
# down, up to HELD_MAX_S; the outage is logged at WARNING once a minute at most.
HELD_RETRY_S = 1.0
HELD_MAX_S = 30.0
HELD_WARN_S = 60.0

# What a delivered copy makes of its source offset.
_RESOLUTIONS = {
    CopyKind.RETRY: Resolution.RETRIED,
    CopyKind.HOP: Resolution.HOPPED,
    CopyKind.PARK: Resolution.PARKED,
    CopyKind.DEAD: Resolution.DEAD,
    CopyKind.DEAD_RAW: Resolution.DEAD,
    CopyKind.OVERFLOW: Resolution.OVERFLOWED,
    CopyKind.RESULT: Resolution.ACKED,
}


class CopyQueue:
    def __init__(
        self,
        *,
        book: PartitionBook,
        status_records: bool = True,
        route: Callable[[list[CopyRequest]], list[CopyRequest]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._book = book
        self._clock = clock
        self._held: list[CopyRequest] = []
        self._held_due = 0.0  # when the held copies are tried next
        self._held_fails = 0  # passes in a row that found the registry still down
        self._held_warned_at = float("-inf")
        # Every copy passes here: per-key ordering turns a line's copies into lane copies.
        self._route = route
        self._copies: list[CopyRequest] = []
        # Status records wait apart, as bare values: one is written for every job
        # that ends, so a succeeded job's costs no CopyRequest (see status_sender).
        self._statuses: list[JobStatus] = []
        # Off (``--no-status``): status records are dropped here, the one door every
        # one passes, so no path of the engine can write one.
        self._status_records = status_records
        # Ids of jobs acked here (``resolved_ids``): a job acked with a result joins them
        # once its result is durable, never before (its copy may yet be dropped).
        self._resolved: ResolvedIds | None = None
        self._now_ms: Callable[[], int] = lambda: 0

    def add(self, requests: list[CopyRequest]) -> None:
        if self._route is not None and requests:
            requests = self._route(requests)
        for request in requests:
            if request.kind is CopyKind.STATUS:
                if request.status is not None:
                    self.add_status(request.status)
                continue
            self._book.count_copy(request, 1)
            if request.kind is CopyKind.HELD:
                self._hold(request)
            else:
                self._copies.append(request)

    def add_status(self, status: JobStatus) -> None:
        """How a job ended, for ``jobs.Q.status``; resolves nothing, nothing waits for it."""
        if self._status_records:
            self._statuses.append(status)

    def take(self) -> list[CopyRequest]:
        if self._held and self._clock() >= self._held_due:
            self._build_held()
        taken, self._copies = self._copies, []
        return taken

    def _hold(self, request: CopyRequest) -> None:
        self._book.counters.schema_waits += 1
        if not self._held:
            self._held_due = max(self._held_due, self._clock() + HELD_RETRY_S)
        self._held.append(request)
        self._warn(request)

    def _build_held(self) -> None:
        """Build the held copies again, oldest first, until one still lacks its schema."""
        held, self._held = self._held, []
        built: list[CopyRequest] = []
        for index, request in enumerate(held):
            if self._book.current(request.source, request.generation) is None:
                continue  # its partition moved: the next owner reads the job again
            assert request.again is not None
            copy = request.again()
            if request.run_s or request.progress:  # a nack's, kept for its status record
                copy = replace(copy, run_s=request.run_s, progress=request.progress)
            if copy.kind is CopyKind.HELD:  # still down: it keeps its place and count
                self._held = [copy, *held[index + 1 :], *self._held]
                self._held_fails = min(self._held_fails + 1, 16)  # 2**16 s is past the cap
                delay = min(HELD_MAX_S, HELD_RETRY_S * 2.0**self._held_fails)
                self._held_due = self._clock() + delay
                self._warn(copy)
                break
            self._book.count_copy(request, -1)
            built.append(copy)
        else:
            self._held_fails = 0
        self.add(built)

    def _warn(self, request: CopyRequest) -> None:
        now = self._clock()
        if now - self._held_warned_at < HELD_WARN_S:
            return
        self._held_warned_at = now
        log.warning(
            "%d job copies wait for their envelope's schema: the Schema Registry does not "
            "answer and the schema is not cached (%s). They are built again with backoff "
            "once it answers; their offsets hold the commit, nothing is dead-lettered for it",
            len(self._held),
            request.detail,
        )

    def take_statuses(self) -> list[JobStatus]:
        taken, self._statuses = self._statuses, []
        return taken

    def remember_results(self, resolved: ResolvedIds, now_ms: Callable[[], int]) -> None:
        """Where a job acked with a result is remembered as ended, once it is durable."""
        self._resolved, self._now_ms = resolved, now_ms

    def done(self, request: CopyRequest, *, delivered: bool = False) -> None:
        """Delivered or dropped: no longer in flight for its partition. A delivered
        result sends its job's status record now, so the status never says "succeeded"
        before the value can be read."""
        if _counted(request):
            self._book.count_copy(request, -1)
        if delivered and request.kind is CopyKind.RESULT:
            if request.status is not None:
                self.add_status(request.status)
            if self._resolved is not None and request.raw_key is not None:
                self._resolved.ended(request.raw_key.decode(), self._now_ms())


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
