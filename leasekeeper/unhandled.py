"""Ready jobs whose type no connected worker runs.

Such a job waits instead of bouncing between workers that would release it. The
first time no worker could take it is written to the store (so a restart does
not restart the grace), and after ``unknown_type_grace_s`` it is dead-lettered
as ``UnknownJobType``. No connected worker at all is an outage, not an unknown
type: nothing is swept then (see ``ConnectedWorkers.handled``).
"""

from __future__ import annotations

from leasekeeper.copies import CopyRequest
from leasekeeper.engine_config import EngineContext
from leasekeeper.failures import FailurePath
from leasekeeper.leases import Pending
from leasekeeper.partition_book import PartitionBook
from leasekeeper.store import StoreBatch
from leasekeeper.window import ReadyWindow
from leasekeeper.workers_seen import ConnectedWorkers


class UnhandledSweep:
    def __init__(
        self,
        *,
        ctx: EngineContext,
        book: PartitionBook,
        window: ReadyWindow,
        failures: FailurePath,
    ) -> None:
        self._book = book
        self._window = window
        self._store = ctx.store
        self._failures = failures
        self._grace_ms = int(ctx.config.unknown_type_grace_s * 1000)
        self.workers = ConnectedWorkers(forget_after_ms=int(ctx.config.worker_seen_s * 1000))

    def sweep(self, now: int) -> list[CopyRequest]:
        """The dead letters of jobs that waited past the grace (``now`` is epoch ms)."""
        handled = self.workers.handled(now)
        if handled is None or all(t in handled for t in self._window.ready_types()):
            return []  # the common case, told by type, without a pass over the window
        batch = self._store.batch()
        overdue = {
            id(p)
            for p in self._window.ready()
            if p.job.type not in handled and now - self._since(p, now, batch) >= self._grace_ms
        }
        self._store.write(batch)
        if not overdue:
            return []
        removed = self._window.remove_ready(lambda p: id(p) in overdue)
        return [self._failures.unknown_type(p, handled, now) for p in removed]

    def _since(self, pending: Pending, now: int, batch: StoreBatch) -> int:
        state = self._book.parts[pending.tp]
        since = state.unhandled_since.get(pending.offset)
        if since is None:
            since = state.unhandled_since[pending.offset] = now
            batch.unhandled(pending.tp.topic, pending.tp.partition, pending.offset, now)
        return since
