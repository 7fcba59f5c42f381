"""Ready jobs whose type no connected worker runs.

Such a job waits instead of bouncing between workers that would release it. The
first time no worker could take it is written to the store (so a restart does
not restart the grace), and after ``unknown_type_grace_s`` it is dead-lettered
as ``UnknownJobType``. No connected worker at all is an outage, not an unknown
type: nothing is swept then (see ``ConnectedWorkers.handled``).

A type that waits longer than ``WARN_AFTER_MS`` (or half the grace, when that is
shorter: the warning must come well before the dead letters) is warned about (logged once, again
every ``REPEAT_MS`` while it lasts, and kept in ``waits`` for the snapshot): the
wait is otherwise silent until the DLQ. It is worked out here, in the periodic
sweep, from the pass the grace needs anyway; a job's own path never sees it.
"""

from __future__ import annotations

import logging

from jobcore.plain import plain
from leasekeeper.core.context import EngineContext
from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.leases import Pending
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.retry_path import FailurePath
from leasekeeper.core.store import StoreBatch
from leasekeeper.core.unhandled_warning import (
    REPEAT_MS,
    WARN_AFTER_MS,
    UnhandledWait,
    unhandled_text,
)
from leasekeeper.core.window import ReadyWindow
from leasekeeper.core.workers_seen import ConnectedWorkers

log = logging.getLogger(__name__)


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
        self._warn_after_ms = min(WARN_AFTER_MS, self._grace_ms // 2)
        self._queue = ctx.config.queue
        self.workers = ConnectedWorkers(forget_after_ms=int(ctx.config.worker_seen_s * 1000))
        # The types warned about now, and when each was last logged.
        self.waits: tuple[UnhandledWait, ...] = ()
        self._logged: dict[str, int] = {}

    def sweep(self, now: int) -> list[CopyRequest]:
        """The dead letters of jobs that waited past the grace (``now`` is epoch ms)."""
        handled = self.workers.handled(now)
        if handled is None or all(t in handled for t in self._window.ready_types()):
            self._warn((), now)
            return []  # the common case, told by type, without a pass over the window
        batch = self._store.batch()
        overdue: set[int] = set()
        waiting: dict[str, _Waiting] = {}
        for p in self._window.ready():
            if p.job.type in handled:
                continue
            since = self._since(p, now, batch)
            if now - since >= self._grace_ms:
                overdue.add(id(p))
            else:
                waiting.setdefault(p.job.type, _Waiting()).add(p, since)
        self._store.write(batch)
        self._warn(self._waits(waiting, handled, now), now)
        if not overdue:
            return []
        removed = self._window.remove_ready(lambda p: id(p) in overdue)
        return [self._failures.unknown_type(p, handled, now) for p in removed]

    def _waits(
        self, waiting: dict[str, _Waiting], handled: frozenset[str], now: int
    ) -> tuple[UnhandledWait, ...]:
        runs = tuple(sorted(handled))
        return tuple(
            UnhandledWait(
                type=job_type,
                queue=self._queue,
                topics=tuple(sorted(w.topics)),
                jobs=w.jobs,
                since_ms=w.since,
                dead_at_ms=w.since + self._grace_ms,
                handled=runs,
            )
            for job_type, w in sorted(waiting.items())
            if now - w.since >= self._warn_after_ms
        )

    def _warn(self, waits: tuple[UnhandledWait, ...], now: int) -> None:
        """Log each wait when it starts and every ``REPEAT_MS`` while it lasts, and
        say once when one ends."""
        if not waits and not self.waits:
            return
        for wait in waits:
            if now - self._logged.get(wait.type, now - REPEAT_MS) >= REPEAT_MS:
                self._logged[wait.type] = now
                log.warning("%s", unhandled_text(plain(wait), now))
        for job_type in set(self._logged) - {w.type for w in waits}:
            del self._logged[job_type]
            log.info("no ready job of type %r waits for a worker any more", job_type)
        self.waits = waits

    def _since(self, pending: Pending, now: int, batch: StoreBatch) -> int:
        state = self._book.parts[pending.tp]
        since = state.unhandled_since.get(pending.offset)
        if since is None:
            since = state.unhandled_since[pending.offset] = now
            batch.unhandled(pending.tp.topic, pending.tp.partition, pending.offset, now)
        return since


class _Waiting:
    """One unhandled type's ready jobs as the sweep counts them."""

    __slots__ = ("jobs", "since", "topics")

    def __init__(self) -> None:
        self.jobs = 0
        self.since = 0
        self.topics: set[str] = set()

    def add(self, pending: Pending, since: int) -> None:
        self.since = since if self.jobs == 0 else min(self.since, since)
        self.jobs += 1
        self.topics.add(pending.tp.topic)
