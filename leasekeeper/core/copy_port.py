"""The outbox's port: copies the core decided, taken to be sent, and what became of
them (delivered, or dropped because their partition moved).

Called by the copy sender and the result sender (``leasekeeper/kafka/``) on the
Kafka loop's thread, so no RPC thread ever produces.
"""

from __future__ import annotations

import threading

from jobcore.control import JobStatus
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.deliveries import Deliveries
from leasekeeper.core.partition_book import PartitionBook

__all__ = ["CopyPort"]


class CopyPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        copies: CopyQueue,
        book: PartitionBook,
        deliveries: Deliveries,
    ) -> None:
        self._lock = lock
        self._copies = copies
        self._book = book
        self._deliveries = deliveries

    def add(self, request: CopyRequest) -> None:
        """Queue a copy decided outside the core (a hop, an undecodable record's dead
        letter), counted in flight like the core's own."""
        with self._lock:
            self._copies.add([request])

    def take(self) -> list[CopyRequest]:
        """Copies queued since the last call, to send."""
        with self._lock:
            return self._copies.take()

    def take_statuses(self) -> list[JobStatus]:
        """Status records (how jobs ended) queued since the last call, to send."""
        with self._lock:
            return self._copies.take_statuses()

    def is_current(self, request: CopyRequest) -> bool:
        """False once the copy's partition moved: the next owner runs the job again.
        A status record is always current: the job ended here whoever owns it now."""
        if request.kind is CopyKind.STATUS:
            return True
        with self._lock:
            return self._book.current(request.source, request.generation) is not None

    def delivered(self, request: CopyRequest, *, dead: bool = False, at: int = -1) -> None:
        """The copy is durable (see ``Deliveries``)."""
        with self._lock:
            self._deliveries.apply((request,), dead=dead, at=at)

    def delivered_many(self, requests: list[CopyRequest]) -> None:
        """Several copies durable at once (a poll's delivery reports): one store write."""
        with self._lock:
            self._deliveries.apply(requests)

    def dropped(self, request: CopyRequest) -> None:
        """The outbox gave up a copy whose partition moved: no longer in flight here."""
        with self._lock:
            self._deliveries.dropped(request)
