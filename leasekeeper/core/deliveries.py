"""What a durable copy changes: its source offset resolves, unless a feature settles
what the copy was for itself.

A copy is delivered when Kafka has it (a retry, a dead letter, a result, a lane
record, an overflow copy, a dedupe claim). The core then resolves the copy's
source offset as the copy's kind says (``copy_queue.resolution_of``). Features that
made the copy for a purpose of their own hear of the delivery first, through
``DeliveryHook`` (``core/hooks.py``), in the order they were given: the overflow
lane counts its moves; ordering keeps a lane copy's offset open (the job runs once
its line lets it); intake lets a job whose dedupe claim is durable run. A hook that answers True has
settled the copy: nothing more is resolved for it.

Deliveries come one at a time from the outbox and by the poll from the result sender.
Either way they are applied under the engine's lock with one store write for the
lot: a result record is one copy per job, so a write per delivery was much of what
a result cost the leasekeeper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from leasekeeper.core.clocks import now_ms
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_queue import CopyQueue, dead_status, resolution_of
from leasekeeper.core.hooks import DeliveryHook
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.store import StoreBatch
from leasekeeper.core.store_values import Resolution

__all__ = ["Deliveries"]


class Deliveries:
    """Applies delivered copies; called under the engine's lock."""

    def __init__(
        self,
        *,
        copies: CopyQueue,
        book: PartitionBook,
        reader: JobReader,
        clock: Callable[[], float],
        hooks: Sequence[DeliveryHook],
    ) -> None:
        self._copies = copies
        self._book = book
        self._reader = reader
        self._clock = clock
        self._hooks = tuple(hooks)

    def apply(self, requests: Iterable[CopyRequest], *, dead: bool = False, at: int = -1) -> None:
        batch = self._book.store_batch()
        for request in requests:
            if request.kind is not CopyKind.STATUS:  # nothing waits for a status record
                self._one(request, dead, at, batch)
        self._book.write(batch)

    def _one(self, request: CopyRequest, dead: bool, at: int, batch: StoreBatch) -> None:
        self._copies.done(request, delivered=True)
        for hook in self._hooks:
            if hook.copy_delivered(request, dead=dead, at=at):
                return
        how = Resolution.DEAD if dead else resolution_of(request)
        self._book.resolve(request.source, request.offset, request.generation, how, batch)
        if how is Resolution.DEAD and (job := self._reader.copied(request)) is not None:
            self._copies.add([dead_status(request, job, now_ms(self._clock))])

    def dropped(self, request: CopyRequest) -> None:
        """The outbox gave ``request`` up: not in flight here, and the features forget it."""
        self._copies.done(request)
        for hook in self._hooks:
            hook.copy_dropped(request)
