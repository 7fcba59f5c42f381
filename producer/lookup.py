"""``JobProducer.status`` and ``producer status``: where a job is, or how it ended.

Two sources, and the answer names the one it used:

- the dashboard's JSON API (``dashboard=URL``), which combines the leasekeepers'
  live snapshots (leased, with the worker) with the status topic; it cannot see
  a ready or delayed job (``inspect job`` on the queue's leasekeeper can);
- without it, ``jobs.Q.status`` read directly (a scan of its tail): it knows
  how finished jobs ended (succeeded, dead with the reason, cancelled, skipped as
  a duplicate of which job), not where a waiting one is.

A job neither source knows is reported honestly: "enqueued, not yet seen by a
leasekeeper" when the caller says when it was enqueued, otherwise "not found yet",
with a note naming the source that can see a waiting job. The states and the
report are ``jobcore.job_state``'s, shared by every reader.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from jobcore.job_state import (
    DASHBOARD_KNOWS,
    STATUS_TOPIC_KNOWS,
    JobReport,
    JobState,
    from_answer,
    from_status,
)
from jobcore.kafka import KafkaSettings
from jobcore.result_reader import ResultsUnreadable, stored_result
from jobcore.results import result_text
from jobcore.status import ended_status, switched_off_note
from jobcore.terminal_text import printable
from jobcore.topics import QueueTopics
from schemas.codec import SchemaRegistry

__all__ = ["NOT_FOUND", "NOT_SEEN", "JobLookup", "JobLookupError", "lookup"]

NOT_FOUND = JobState.NOT_FOUND.value
NOT_SEEN = JobState.NOT_SEEN.value


class JobLookupError(RuntimeError):
    """The dashboard could not be asked (unreachable, refused, not a dashboard)."""


@dataclass(frozen=True, kw_only=True)
class JobLookup(JobReport):
    """The shared report, as ``producer status`` prints it."""

    def lines(self, describe_time: Callable[[int], str]) -> list[str]:
        """What ``producer status`` prints; ``describe_time`` renders epoch ms. The
        worker id and the last error are the handlers' text: shown as text only."""
        details = [
            f"{k} {v}"
            for k, v in (
                ("worker", self.worker),
                ("attempt", self.attempt),
                ("due", None if self.until_ms is None else describe_time(self.until_ms)),
                ("duplicate of", self.duplicate_of),
                ("ran", None if self.duration_s is None else f"{self.duration_s:.3f} s"),
                ("progress", self.progress_text),
                ("reason", self.reason),
                ("last error", self.last_error),
                ("result", self.result),
            )
            if v is not None
        ]
        when = f" at {describe_time(self.at_ms)}" if self.at_ms else ""
        extra = f" ({', '.join(details)})" if details else ""
        line = f"job {self.job_id}: {self.state.value}{when}{extra} [from the {self.source}]"
        return [printable(line)] + ([f"  {printable(self.note)}"] if self.note else [])


def _unknown(
    job_id: str, source: str, enqueued_at_ms: int | None, note: str | None = None
) -> JobLookup:
    state = JobState.NOT_SEEN if enqueued_at_ms is not None else JobState.NOT_FOUND
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
        raise JobLookupError(f"cannot ask the dashboard at {url}: {exc}") from None
    if not isinstance(answer, dict) or "state" not in answer:
        raise JobLookupError(f"{url} did not answer like a dashboard: {str(answer)[:200]}")
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
    registry: SchemaRegistry | None = None,
) -> JobLookup:
    """Where ``job_id`` is or how it ended: from the dashboard's API at ``dashboard``, else
    the status topic; a succeeded job's result as JSON text (Avro decoded by
    ``registry``)."""
    if dashboard:
        found = from_dashboard(dashboard, queue, job_id, token=token)
        source = f"dashboard {dashboard}"
        if found["state"] == NOT_FOUND:
            note = found.get("note")
            return _unknown(job_id, source, enqueued_at_ms, str(note) if note else DASHBOARD_KNOWS)
        return _printable(from_answer(found, source=source))
    topic = QueueTopics(queue=queue, prefix=prefix).status
    source = f"status topic {topic}"
    status, off = ended_status(settings, topic, job_id)
    if status is None:
        note = switched_off_note(queue, off.at_ms) if off is not None else STATUS_TOPIC_KNOWS
        return _unknown(job_id, source, enqueued_at_ms, note)
    report = _printable(from_status(status, source=source, queue=queue))
    if report.state is not JobState.SUCCEEDED:
        return report
    try:
        value = stored_result(settings, QueueTopics(queue=queue, prefix=prefix), job_id)
    except ResultsUnreadable:  # a queue from before results: no results topic to read
        return report
    return report if value is None else replace(report, result=result_text(value, registry))


def _printable(report: JobReport) -> JobLookup:
    return JobLookup(**{f.name: getattr(report, f.name) for f in fields(report)})
