"""The dashboard's copy of ``jobs._outbox_relays``: each outbox relay's latest report.

Fed by the same reader thread as the leasekeepers' snapshots (``FleetReader``),
aged out the same way (``STALE_AFTER_S``): a relay that stops cleanly writes a
tombstone and disappears at once; one that died disappears when its last report
is too old. Rendered here too, so the overview only asks for the section.
"""

from __future__ import annotations

import json
import threading

from jobcore.relay_report import RelayReport
from leasekeeper.dashboard.fleet_view import STALE_AFTER_S
from leasekeeper.dashboard.html import Raw, e, table

__all__ = ["RelayState", "human_duration", "relays_section"]


class RelayState:
    """Latest report per relay instance; thread safe (the reader writes, pages read)."""

    def __init__(self, stale_after_s: float = STALE_AFTER_S) -> None:
        self._reports: dict[str, RelayReport] = {}
        self._stale_after_ms = stale_after_s * 1000
        self._lock = threading.Lock()

    def apply(self, key: str, value: bytes | None) -> None:
        """One record of the topic; a tombstone removes the instance, and a record
        this version cannot read is skipped (the previous one stays until stale)."""
        with self._lock:
            if value is None:
                self._reports.pop(key, None)
                return
            try:
                record = json.loads(value)
                report = RelayReport.from_record(record)
            except (ValueError, KeyError, TypeError):
                return
            self._reports[key] = report

    def current(self, now_ms: int) -> list[RelayReport]:
        """Live relays (reported recently), by database then instance."""
        with self._lock:
            live = [
                r
                for r in self._reports.values()
                if now_ms - r.published_at_ms <= self._stale_after_ms
            ]
        return sorted(live, key=lambda r: (r.database, r.instance))


def human_duration(seconds: float) -> str:
    """A lag as people read it: 850 ms, 4.2 s, 3 min 5 s, 2 h 10 min."""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def _row(report: RelayReport, now_ms: int) -> tuple[object, ...]:
    published = human_duration(max(0, now_ms - report.published_at_ms) / 1000) + " ago"
    role = "active" if report.active else "standby"
    if report.error is not None:
        cannot = Raw(f'<span class="bad">cannot read the database: {e(report.error)}</span>')
        return (report.instance, report.database, role, "?", "?", report.relayed, published, cannot)
    lag = human_duration(report.lag_s or 0.0) if report.waiting else "-"
    figures = (report.waiting, lag, report.relayed, published, "")
    return (report.instance, report.database, role, *figures)


def relays_section(reports: list[RelayReport], now_ms: int) -> str:
    """The "Outbox relays" section of the overview; nothing when no relay is live."""
    if not reports:
        return ""
    headers = (
        "instance",
        "database",
        "role",
        "rows waiting",
        "lag",
        "relayed",
        "last report",
        "problem",
    )
    rows = [_row(r, now_ms) for r in reports]
    note = (
        '<p class="muted">lag: age of the oldest row staged in job_outbox and not yet '
        "relayed; every relay of a database reports the same backlog</p>"
    )
    return '<h2 id="outbox-relays">Outbox relays</h2>' + table(headers, rows, numeric=(3, 5)) + note
