"""One answer to "where is my job?": the states a job can be in, and one report of them.

Four readers answer it from what each can see: ``producer status`` and
``JobProducer.status()`` (the status topic, or the dashboard), the dashboard's
Job page and ``/api/job`` (live leases and the status topic), and ``leasekeeper
inspect job`` (one leasekeeper's window, timer and notes, then the status
topic). Each builds a ``JobReport`` here, so that the same job gets the same
state, with the same fields, whichever reader is asked, and a reader that cannot
see a waiting state says so and names the one that can (its ``note``).

What each source can know:

- the status topic: the end of a job (succeeded, dead, cancelled, skipped as a
  duplicate), never where a waiting one is;
- the dashboard: a leased job (the leasekeepers' live snapshots) and an ended
  one (the status topic), not a ready or delayed one;
- ``leasekeeper inspect job`` on the leasekeeper that owns the job's partition:
  ready, delayed (until when), leased, skipped, cancelled; an ended job through
  the status topic when Kafka is named.

A new fact about a job (its result, its progress) is a field of ``JobReport``,
so that every reader shows it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TypeVar

from jobcore.control import CancelledHow, JobEnd, JobStatus
from jobcore.progress import JobProgress

__all__ = [
    "DASHBOARD_KNOWS",
    "STATUS_TOPIC_KNOWS",
    "JobReport",
    "JobState",
    "from_answer",
    "from_inspect",
    "from_status",
    "progress_in",
    "with_progress",
]


class JobState(StrEnum):
    """Where a job is (ready, delayed, leased) or how it ended (the rest)."""

    READY = "ready"
    DELAYED = "delayed"
    LEASED = "leased"
    SKIPPED = "skipped"  # as a duplicate of an earlier job with its dedupe key
    CANCELLED = "cancelled"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    # No source asked knows the job (yet): the report's ``note`` says which may.
    NOT_FOUND = "not found yet"
    NOT_SEEN = "enqueued, not yet seen by a leasekeeper"


ENDED = frozenset({JobState.SKIPPED, JobState.CANCELLED, JobState.SUCCEEDED, JobState.DEAD})

# What a reader that sees no waiting job says, naming the source that can.
STATUS_TOPIC_KNOWS = (
    "the status topic knows finished jobs only (succeeded, dead, cancelled, skipped): "
    "a leased job shows with --dashboard URL, a ready or delayed one with "
    "`leasekeeper inspect job ID` on the queue's leasekeeper"
)
DASHBOARD_KNOWS = (
    "the dashboard knows leased and finished jobs only: a ready or delayed job shows "
    "with `leasekeeper inspect job ID` on the queue's leasekeeper"
)


@dataclass(frozen=True, kw_only=True)
class JobReport:
    """One job's state as one source (``source``) can know it. ``until_ms`` is when a
    delayed job is due, ``duplicate_of`` the job a skipped one duplicated; ``at_ms``
    when the job ended (or was enqueued, for ``NOT_SEEN``). ``note`` says what this
    source cannot know and which source can, when the answer may be incomplete."""

    state: JobState
    job_id: str
    source: str
    queue: str | None = None
    worker: str | None = None
    attempt: int | None = None
    until_ms: int | None = None
    duplicate_of: str | None = None
    reason: str | None = None
    last_error: str | None = None
    at_ms: int | None = None
    duration_s: float | None = None
    note: str | None = None
    # Where the job's last record is (``topic/partition/offset``), when the source
    # knows: a reader can show the job itself from there.
    record: str | None = None
    # How far a leased job has got, or a finished one had got, as its worker last
    # said (``jobcore.progress``): a fraction from 0 to 1 and its message.
    progress: float | None = None
    progress_message: str | None = None
    # The value a succeeded job returned, as JSON text, when it returned one and the
    # results topic still keeps it (``jobcore.results``).
    result: str | None = None

    def __post_init__(self) -> None:
        # Callers that pass the state's text get the state: one spelling of each.
        object.__setattr__(self, "state", JobState(self.state))

    @property
    def finished(self) -> bool:
        return self.state in ENDED

    @property
    def progress_text(self) -> str | None:
        """The progress for people ("40% rendered 800 of 2,000 pages"), None without."""
        value = JobProgress.from_fields(self.progress, self.progress_message)
        return None if value is None else value.text()


def with_progress(report: Report, value: JobProgress | None) -> Report:
    """``report`` with a status record's or a lease's progress (unchanged for none)."""
    if value is None:
        return report
    return replace(report, progress=value.fraction, progress_message=value.message or None)


def progress_in(found: Mapping[str, object]) -> JobProgress | None:
    """The progress of a JSON view (``/api/job``, ``inspect job --json``, a lease in a
    leasekeeper's snapshot)."""
    return JobProgress.from_fields(found.get("progress"), found.get("progress_message"))


Report = TypeVar("Report", bound=JobReport)


def state_of(status: JobStatus) -> JobState:
    """A status record's state: a skipped duplicate is recorded as cancelled with the
    job it duplicated (a value every older reader decodes), and read back as skipped."""
    if status.state is JobEnd.CANCELLED and (
        status.duplicate_of or status.reason == CancelledHow.DUPLICATE.value
    ):
        return JobState.SKIPPED
    return JobState(status.state.value)


def from_status(status: JobStatus, *, source: str, queue: str | None = None) -> JobReport:
    """A finished job, from its status record."""
    report = JobReport(
        state=state_of(status),
        job_id=status.job_id,
        source=source,
        queue=queue,
        worker=status.worker or None,
        attempt=status.attempt,
        duplicate_of=status.duplicate_of or None,
        reason=status.reason or None,
        last_error=status.last_error or None,
        at_ms=status.at_ms,
        duration_s=status.duration_s,
        record=status.record or None,
    )
    return with_progress(report, status.progress)


def from_answer(found: dict[str, object], *, source: str) -> JobReport:
    """A report sent as JSON (the dashboard's ``/api/job``), read back; a state this
    version does not know is reported as not found, with the text it came as."""

    def text(key: str) -> str | None:
        value = found.get(key)
        return None if value is None else str(value)

    def number(key: str) -> int | None:
        value = found.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    shown, duration = str(found.get("state")), found.get("duration_s")
    known = shown in JobState._value2member_map_
    report = JobReport(
        state=JobState(shown) if known else JobState.NOT_FOUND,
        job_id=str(found.get("job_id", "")),
        source=source,
        queue=text("queue"),
        worker=text("worker"),
        attempt=number("attempt"),
        until_ms=number("until_ms"),
        duplicate_of=text("duplicate_of"),
        reason=text("reason"),
        last_error=text("last_error"),
        at_ms=number("at_ms"),
        duration_s=float(duration) if isinstance(duration, int | float) else None,
        note=text("note") if known else f"the source answered {shown!r}",
        record=text("record"),
        result=text("result"),
    )
    return with_progress(report, progress_in(found))


# ``inspect job`` states that are no job state: the leasekeeper does not know it.
_INSPECT_UNKNOWN = frozenset({"unknown", "ambiguous", "cancellation recorded"})


def from_inspect(view: dict[str, object], *, source: str) -> JobReport:
    """What ``leasekeeper inspect job --json`` answered, as a report."""

    def text(key: str) -> str | None:
        value = view.get(key)
        return None if value is None else str(value)

    def number(*keys: str) -> int | None:
        for key in keys:
            value = view.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    shown = str(view.get("state", "unknown"))
    state = JobState.NOT_FOUND if shown in _INSPECT_UNKNOWN else JobState(shown)
    duration = view.get("duration_s")
    report = JobReport(
        state=state,
        job_id=str(view.get("job_id", "")),
        source=source,
        worker=text("worker"),
        attempt=number("attempt"),
        until_ms=number("due_ms") if state is JobState.DELAYED else None,
        duplicate_of=text("duplicate_of"),
        reason=text("reason"),
        last_error=text("last_error"),
        at_ms=number("ended_at_ms", "skipped_at_ms", "cancelled_at_ms"),
        duration_s=float(duration) if isinstance(duration, int | float) else None,
        note=text("problem"),
    )
    return with_progress(report, progress_in(view))
