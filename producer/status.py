"""What ``producer cancel`` can truthfully say, from ``jobs.Q.status``.

The leasekeeper writes one status record when a job succeeds, dies or is
cancelled (compacted, keyed by job id, one partition). ``cancel`` reads the
topic before recording the cancellation (a job that already ended is not
cancelled, and the answer says when it ended), then waits a few seconds for the
leasekeeper to answer for the cancellation (skipped while waiting, or its lease
ended while running). A job no leasekeeper answers for is not found yet: the
cancellation stays recorded and skips the job if it appears within the control
topic's retention.

The read is a scan of the status partition's tail (``MAX_SCAN`` records): cheap
for the jobs a person cancels by hand, which are recent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, StrEnum

from jobcore.control import CancelledHow, JobEnd, JobStatus
from jobcore.status import MAX_SCAN as MAX_SCAN
from jobcore.status import StatusError as StatusError
from jobcore.status import StatusReader as StatusReader

# How long the cancellation stays recorded (the control topic's retention), in days.
CANCEL_DAYS = 35


class CancelOutcome(StrEnum):
    """Which case applied; each has its exit code (``EXIT_CODES``)."""

    CANCELLED_WAITING = "cancelled while waiting"
    LEASE_ENDED = "lease ended while running"
    ALREADY_SUCCEEDED = "not cancelled: already succeeded"
    ALREADY_DEAD = "not cancelled: already dead"
    ALREADY_SKIPPED = "not cancelled: already skipped as a duplicate"
    NOT_FOUND = "not found yet"
    RECORDED = "cancellation recorded"  # no status topic: the queue predates it


class CancelExit(IntEnum):
    """``producer cancel`` exit codes, beside every command's 1 (failure), 2 (setup
    mistake) and 3 (Kafka unreachable), after which nothing was recorded."""

    CANCELLED = 0
    RECORDED = 0
    LEASE_ENDED = 4
    ALREADY_ENDED = 5
    NOT_FOUND = 6


EXIT_CODES = {
    CancelOutcome.CANCELLED_WAITING: CancelExit.CANCELLED,
    CancelOutcome.RECORDED: CancelExit.RECORDED,
    CancelOutcome.LEASE_ENDED: CancelExit.LEASE_ENDED,
    CancelOutcome.ALREADY_SUCCEEDED: CancelExit.ALREADY_ENDED,
    CancelOutcome.ALREADY_DEAD: CancelExit.ALREADY_ENDED,
    CancelOutcome.ALREADY_SKIPPED: CancelExit.ALREADY_ENDED,
    CancelOutcome.NOT_FOUND: CancelExit.NOT_FOUND,
}


@dataclass(frozen=True, kw_only=True)
class CancelAnswer:
    job_id: str
    outcome: CancelOutcome
    status: JobStatus | None = None

    @property
    def exit_code(self) -> int:
        return int(EXIT_CODES[self.outcome])

    def message(self, describe_time: Callable[[int], str]) -> str:
        """One line for a person; ``describe_time`` renders epoch ms."""
        status, job = self.status, self.job_id
        if self.outcome is CancelOutcome.RECORDED:
            return "cancellation recorded: the job will be skipped if it has not run yet"
        if self.outcome is CancelOutcome.NOT_FOUND:
            return (
                f"job {job} not found yet: cancellation recorded; it will be skipped if it "
                f"appears within {CANCEL_DAYS} days"
            )
        assert status is not None
        at = describe_time(status.at_ms)
        if self.outcome is CancelOutcome.CANCELLED_WAITING:
            return f"cancelled {job} while it waited (ready or delayed): it will not run"
        if self.outcome is CancelOutcome.LEASE_ENDED:
            return (
                f"cancelled {job} while it ran (attempt {status.attempt}): its lease ended at {at}"
            )
        if self.outcome is CancelOutcome.ALREADY_SKIPPED:
            return (
                f"not cancelled: job {job} already skipped at {at} as a duplicate of "
                f"{status.duplicate_of}"
            )
        ended = "succeeded" if status.state is JobEnd.SUCCEEDED else f"died ({status.reason})"
        return f"not cancelled: job {job} already {ended} at {at} (attempt {status.attempt})"


def ended(status: JobStatus) -> CancelOutcome:
    """The answer a status record gives (pure)."""
    if status.state is JobEnd.SUCCEEDED:
        return CancelOutcome.ALREADY_SUCCEEDED
    if status.state is JobEnd.DEAD:
        return CancelOutcome.ALREADY_DEAD
    if status.duplicate_of:
        return CancelOutcome.ALREADY_SKIPPED
    if status.reason == CancelledHow.RUNNING.value:
        return CancelOutcome.LEASE_ENDED
    return CancelOutcome.CANCELLED_WAITING
