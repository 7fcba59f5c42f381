"""``JobProducer.status`` and ``producer status``: where a job is, or how it ended.

Two sources, and the answer names the one it used:

- the dashboard's JSON API (``dashboard=URL``), which combines the leasekeepers'
  live snapshots (leased, with the worker) with the status topic; the fast and
  complete answer;
- without it, ``jobs.Q.status`` read directly (a scan of its tail): it knows
  how finished jobs ended (succeeded, dead with the reason, cancelled), not
  where a waiting one is.

A job neither source knows is reported honestly: "enqueued, not yet seen by a
leasekeeper" when the caller says when it was enqueued, otherwise "not found yet".
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from jobcore.kafka import KafkaSettings
from jobcore.status import StatusReader, switched_off_note
from jobcore.terminal_text import printable
from jobcore.topics import QueueTopics

__all__ = ["NOT_FOUND", "NOT_SEEN", "JobLookup", "LookupError", "lookup"]

NOT_FOUND = "not found yet"
NOT_SEEN = "enqueued, not yet seen by a leasekeeper"


class LookupError(RuntimeError):
    """The dashboard could not be asked (unreachable, refused, not a dashboard)."""


@dataclass(frozen=True, kw_only=True)
class JobLookup:
    job_id: str
    state: str  # leased, succeeded, dead, cancelled, NOT_SEEN or NOT_FOUND
    source: str  # "dashboard URL" or "status topic NAME"
    queue: str | None = None
    worker: str | None = None
    attempt: int | None = None
    reason: str | None = None
    last_error: str | None = None
    at_ms: int | None = None
    # The handler's own run time in the last attempt, as its worker reported it.
    duration_s: float | None = None
    # Why a finished job may be missing: its queue writes no status records.
    note: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("succeeded", "dead", "cancelled")

    def lines(self, describe_time: Callable[[int], str]) -> list[str]:
        """What ``producer status`` prints; ``describe_time`` renders epoch ms. The
        worker id and the last error are the handlers' text: shown as text only."""
        details = [
            f"{k} {v}"
            for k, v in (
                ("worker", self.worker),
                ("attempt", self.attempt),
                ("ran", None if self.duration_s is None else f"{self.duration_s:.3f} s"),
                ("reason", self.reason),
                ("last error", self.last_error),
            )
            if v is not None
        ]
        when = f" at {describe_time(self.at_ms)}" if self.at_ms else ""
        extra = f" ({', '.join(details)})" if details else ""
        line = f"job {self.job_id}: {self.state}{when}{extra} [from the {self.source}]"
        return [printable(line)] + ([f"  {printable(self.note)}"] if self.note else [])


def _unknown(
    job_id: str, source: str, enqueued_at_ms: int | None, note: str | None = None
) -> JobLookup:
    state = NOT_SEEN if enqueued_at_ms is not None else NOT_FOUND
    return JobLookup(job_id=job_id, state=state, source=source, at_ms=enqueued_at_ms, note=note)


def from_dashboard(
    url: str, queue: str, job_id: str, *, token: str | None = None, timeout_s: float = 30.0
) -> dict[str, object]:
    """The dashboard's answer for one job (``/api/job``)."""
    query = urllib.parse.urlencode({"id": job_id, "queue": queue})
    request = urllib.request.Request(f"{url.rstrip('/')}/api/job?{query}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
    except (urllib.error.URLError, ValueError, OSError) as exc:
        raise LookupError(f"cannot ask the dashboard at {url}: {exc}") from None
    if not isinstance(answer, dict) or "state" not in answer:
        raise LookupError(f"{url} did not answer like a dashboard: {str(answer)[:200]}")
    return answer


def lookup(
    settings: KafkaSettings,
    queue: str,
    job_id: str,
    *,
    prefix: str,
    dashboard: str | None = None,
    token: str | None = None,
    enqueued_at_ms: int | None = None,
) -> JobLookup:
    if dashboard:
        found = from_dashboard(dashboard, queue, job_id, token=token)
        source = f"dashboard {dashboard}"
        if found["state"] == NOT_FOUND:
            note = found.get("note")
            return _unknown(job_id, source, enqueued_at_ms, str(note) if note else None)
        return _from_answer(job_id, source, found)
    topic = QueueTopics(queue=queue, prefix=prefix).status
    source = f"status topic {topic}"
    with StatusReader(settings, topic) as reader:
        status = reader.latest(job_id)
        off = reader.switched_off
    if status is None:
        note = switched_off_note(queue, off.at_ms) if off is not None else None
        return _unknown(job_id, source, enqueued_at_ms, note)
    return JobLookup(
        job_id=job_id,
        state=status.state.value,
        source=source,
        queue=queue,
        attempt=status.attempt,
        reason=status.reason or None,
        worker=status.worker or None,
        last_error=status.last_error or None,
        at_ms=status.at_ms,
        duration_s=status.duration_s,
    )


def _from_answer(job_id: str, source: str, found: dict[str, object]) -> JobLookup:
    def text(key: str) -> str | None:
        value = found.get(key)
        return None if value is None else str(value)

    attempt, at_ms, duration = found.get("attempt"), found.get("at_ms"), found.get("duration_s")
    return JobLookup(
        job_id=job_id,
        state=str(found["state"]),
        source=source,
        queue=text("queue"),
        worker=text("worker"),
        attempt=attempt if isinstance(attempt, int) else None,
        reason=text("reason"),
        last_error=text("last_error"),
        at_ms=at_ms if isinstance(at_ms, int) else None,
        duration_s=float(duration) if isinstance(duration, int | float) else None,
    )
