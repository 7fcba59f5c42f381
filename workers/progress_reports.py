"""Handlers' progress on its way to the leasekeeper: on heartbeats, never a call each.

``ctx.progress()`` only replaces the job's latest value (``workers.context``); the
lease monitor reads it here. Every heartbeat carries the latest progress of each
lease it names, changed or not (a restarted leasekeeper learns it again with the
next one). Heartbeats come a third of a lease apart, too far apart for a useful
display, so a value the leasekeeper has not had yet also goes in a heartbeat of
its own, naming only the leases with news, at most once an ``interval_s``
(a second): a handler reporting in a tight loop costs the worker one small call a
second, and a worker whose handlers never report costs a counter read a tick.
"""

from __future__ import annotations

from collections.abc import Callable

from jobcore.progress import JobProgress
from workers.context import progress_reports
from workers.inflight import Held
from workers.messages import LeaseRef

__all__ = ["PROGRESS_INTERVAL_S", "ProgressReports"]

# The most often progress goes to the leasekeeper ahead of the regular heartbeat.
PROGRESS_INTERVAL_S = 1.0


class ProgressReports:
    """The progress last sent for each lease, and when, so news goes at most once an
    interval. Used by the lease monitor's thread only."""

    def __init__(
        self,
        *,
        interval_s: float = PROGRESS_INTERVAL_S,
        reports: Callable[[], int] = progress_reports,
    ) -> None:
        self._interval_s = interval_s
        self._reports = reports
        self._walked_at = -1  # the count of reports when the jobs were last walked
        self._sent: dict[LeaseRef, JobProgress] = {}  # the value last sent, per lease
        self._sent_at = float("-inf")

    def due(self, beating: Callable[[], list[Held]], now: float) -> list[Held]:
        """The held jobs (of ``beating()``, every lease still worth extending) whose
        handler reported a value the leasekeeper has not had, once ``interval_s``
        passed since progress was last sent; none otherwise. The jobs are walked
        only when some handler reported since the last walk."""
        if now < self._sent_at + self._interval_s:
            return []
        count = self._reports()
        if count == self._walked_at:
            return []
        self._walked_at = count
        held = beating()
        if self._sent:  # forget the leases that ended
            live = {h.ref for h in held}
            self._sent = {ref: value for ref, value in self._sent.items() if ref in live}
        return [h for h in held if _news(h, self._sent.get(h.ref))]

    def take(self, beats: list[Held], now: float) -> dict[str, JobProgress]:
        """The latest progress of each of ``beats`` that has one (by lease id), for the
        heartbeat about to name them; noted as sent at ``now``."""
        values: dict[str, JobProgress] = {}
        for held in beats:
            value = held.ctx.last_progress
            if value is not None:
                values[held.ref.lease_id] = value
                self._sent[held.ref] = value
        if values:
            self._sent_at = now
        return values


def _news(held: Held, sent: JobProgress | None) -> bool:
    value = held.ctx.last_progress
    return value is not None and value is not sent
