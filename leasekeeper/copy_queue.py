"""Copies the engine decided and the outbox has not taken yet.

Any thread (RPC or Kafka loop) appends under the engine's lock; the outbox takes
them on the Kafka loop's thread. Every copy counts as in flight for its partition
from the moment it is decided until it is delivered or dropped, so a partition
is not let go (nor its commit moved) while a copy of one of its jobs is unsent.
"""

from __future__ import annotations

from leasekeeper.copies import CopyRequest
from leasekeeper.partition_book import PartitionBook


class CopyQueue:
    def __init__(self, *, book: PartitionBook) -> None:
        self._book = book
        self._copies: list[CopyRequest] = []

    def add(self, requests: list[CopyRequest]) -> None:
        for request in requests:
            self._book.count_copy(request, 1)
            self._copies.append(request)

    def take(self) -> list[CopyRequest]:
        taken, self._copies = self._copies, []
        return taken

    def done(self, request: CopyRequest) -> None:
        """Delivered or dropped: no longer in flight for its partition."""
        self._book.count_copy(request, -1)
