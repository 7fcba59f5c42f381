"""What ``MemoryQueue.drain`` says happened: one ``JobRun`` per job, each attempt's error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Attempt", "DrainLimit", "DrainReport", "End", "JobRun"]


class End(StrEnum):
    """How a job stands after a drain: the status topic's ends, or still waiting."""

    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a later job of a dedupe key already used
    PENDING = "pending"  # not ended: delayed past the drain, or no handler for its type


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One run of a handler. ``error_class`` is empty when it succeeded; a handler that
    ran past its ``timeout_s`` is settled as ``JobTimeout`` (``timed_out``), as a real
    worker would, and ``ran_past_timeout_s`` says how much longer it kept running
    (on the fake clock): it was told through ``ctx.lease_lost``, never killed."""

    attempt: int
    error_class: str = ""
    message: str = ""
    retry_after_s: float = 0.0
    permanent: bool = False
    timed_out: bool = False
    ran_past_timeout_s: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.error_class)


@dataclass(frozen=True, kw_only=True)
class JobRun:
    """One enqueued job: where it ended (``state``; ``reason`` says why it died or was
    cancelled, as the status topic records it), its attempts as the leasekeeper
    counted them, and every run of its handler."""

    job_id: str
    queue: str
    type: str
    tenant: str
    state: End
    attempts: int
    reason: str = ""
    runs: tuple[Attempt, ...] = ()

    @property
    def errors(self) -> tuple[Attempt, ...]:
        return tuple(run for run in self.runs if run.failed)

    def __str__(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        errors = "".join(f"\n    attempt {e.attempt}: {e.error_class}: {e.message}"
                         for e in self.errors)  # fmt: skip
        return (f"{self.type} tenant={self.tenant} id={self.job_id}: {self.state}{why} "
                f"after {self.attempts} attempt(s){errors}")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class DrainReport:
    """Every job of the queue enqueued since the last ``clear()``, in enqueue order."""

    jobs: tuple[JobRun, ...]
    steps: int

    def __iter__(self) -> Iterator[JobRun]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def job(self, job_id: str) -> JobRun:
        for run in self.jobs:
            if run.job_id == job_id:
                return run
        raise KeyError(f"job {job_id} was not enqueued on this queue (since the last clear())")

    def of_type(self, job_type: str) -> list[JobRun]:
        return [run for run in self.jobs if run.type == job_type]

    def ended(self, state: End | str) -> list[JobRun]:
        return [run for run in self.jobs if run.state == state]

    def __str__(self) -> str:
        return "\n".join(str(run) for run in self.jobs) or "no jobs"


class DrainLimit(RuntimeError):
    """``drain`` took its most steps and work was still coming: a handler that enqueues
    a job every time it runs, or a job retried for ever."""
