"""Keeps held leases alive and enforces handler time limits, on one thread.

Heartbeats are batched: whenever the first held job reaches a third of its
lease, one Heartbeat extends every held lease at once. A refused lease (stale
token, unknown lease) means another worker may be running the job now, so its
context is marked ``lease_lost`` and its result will not be acked.

With ``start_report_s`` (a worker that prefetches), heartbeats also say which
jobs have started, and a job still running ``start_report_s`` after its start
is reported in a heartbeat of its own (batched with the others due): the
leasekeeper gives back the attempt of a job whose lease expires before it
started (see ``leasekeeper.core.started_only``). Jobs that finish sooner are
settled, not reported, so short jobs cost no extra call.

Heartbeats also carry each job's latest progress (``ctx.progress``), and a value
the leasekeeper has not had goes in a heartbeat of its own at most once a second
(see ``workers.progress_reports``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from jobcore.progress import JobProgress
from schemas.lease_answer import LeaseAnswer
from workers.client import LeaseKeeperRejected, LeaseKeeperUnavailable
from workers.inflight import Held, InFlight, Phase
from workers.messages import LeaseRef
from workers.progress_reports import PROGRESS_INTERVAL_S, ProgressReports

log = logging.getLogger(__name__)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class HeartbeatClient(Protocol):
    """The one call the monitor needs (``LeaseKeeperClient`` has it)."""

    def heartbeat(
        self,
        refs: Sequence[LeaseRef],
        /,
        started: Collection[str] = (),
        progress: Mapping[str, JobProgress] | None = None,
    ) -> list[LeaseAnswer]: ...


class LeaseMonitor:
    """Runs ``tick()`` whenever a heartbeat or a deadline is due, until ``stop`` is set."""

    def __init__(
        self,
        *,
        table: InFlight,
        client: HeartbeatClient,
        on_timeout: Callable[[Held], None],
        stop: threading.Event,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = _wall_ms,
        retry_s: float = 1.0,
        idle_s: float = 1.0,
        heartbeats: bool = True,
        start_report_s: float | None = None,
        progress_interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self._heartbeats = heartbeats
        self._progress = ProgressReports(interval_s=progress_interval_s)
        self._start_report_s = start_report_s
        self._table = table
        self._client = client
        self._on_timeout = on_timeout
        self._stop = stop
        self._clock = clock
        self._wall_ms = wall_ms
        self._retry_s = retry_s
        self._idle_s = idle_s
        self._thread = threading.Thread(target=self._run, name="worker-leases", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def tick(self) -> None:
        """Time out overdue handlers, give up expired leases, send a due heartbeat."""
        now = self._clock()
        for held in self._table.timeouts_due(now):
            self._on_timeout(held)
        if not self._heartbeats:
            return  # a worker that cannot reach its leasekeeper (tests of fencing)
        for held in self._table.expired(self._wall_ms()):
            _lose(held, "lease expired before a heartbeat reached the leasekeeper")
        beats = self._table.beats_due(now)
        if not beats and self._start_report_s is not None:
            beats = self._table.starts_due(now, self._start_report_s)
        if not beats:
            beats = self._progress.due(self._table.beating, now)
        if beats:
            self._beat(beats)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("lease monitor tick failed")
            due = self._table.next_due(self._start_report_s)
            timeout = self._idle_s if due is None else min(self._idle_s, due - self._clock())
            if timeout > 0:
                self._table.wait_change(timeout, until=self._clock() + timeout)

    def _beat(self, beats: list[Held]) -> None:
        started = self._started(beats)
        refs, started_ids = [held.ref for held in beats], {h.ref.lease_id for h in started}
        progress = self._progress.take(beats, self._clock())
        try:
            if progress:
                results = self._client.heartbeat(refs, started=started_ids, progress=progress)
            else:  # no progress to send: the call as it was before progress existed
                results = self._client.heartbeat(refs, started=started_ids)
        except (LeaseKeeperUnavailable, LeaseKeeperRejected) as exc:
            log.warning("heartbeat for %d lease(s) failed; retrying: %s", len(beats), exc)
            self._table.reschedule(beats, now=self._clock(), retry_s=self._retry_s)
            return
        self._table.reschedule(beats, now=self._clock())
        by_id = {result.lease_id: result for result in results}
        later: list[Held] = []
        for held in beats:
            result = by_id.get(held.ref.lease_id)
            if result is None:
                log.warning("heartbeat answer lacks lease %s", held.ref.lease_id)
            elif result.retry_later:
                later.append(held)  # a restarted leasekeeper has not re-read it yet
            elif not result.ok:
                _lose(held, f"heartbeat refused: {result.reason or 'no reason given'}")
            else:
                self._table.extend(held, result.until_ms)
        self._table.reported_started([h for h in started if _ok(by_id.get(h.ref.lease_id))])
        if later:
            log.info("leasekeeper asks to retry %d heartbeat(s) later", len(later))
            self._table.reschedule(later, now=self._clock(), retry_s=self._retry_s)

    def _started(self, beats: list[Held]) -> list[Held]:
        if self._start_report_s is None:
            return []
        return [held for held in beats if held.phase is Phase.RUNNING]


def _ok(result: LeaseAnswer | None) -> bool:
    return result is not None and result.ok


def _lose(held: Held, reason: str) -> None:
    if held.ctx.mark_lease_lost(reason):
        log.warning(
            "job %s (%s, lease %s) lost its lease: %s; its result will not be acked",
            held.ctx.job_id,
            held.ctx.type,
            held.ref.lease_id,
            reason,
        )
