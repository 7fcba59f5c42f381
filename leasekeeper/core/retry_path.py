"""The retry path: what a failed attempt becomes, as a copy to make durable.

A nack, an expired lease, a job past its timeout, a poison pill and a job no
worker runs all end here: the retry policy (with the retry budget) decides
between a retry to the delay tier that fits the backoff and a dead letter, and
the answer is a ``CopyRequest`` value. Nothing here touches the store or Kafka.
A job whose envelope schema the registry cannot give now gets a held copy that makes
the same call again later (``JobReader.unreadable``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from leasekeeper.core.clocks import now_ms
from leasekeeper.core.context import CoreSettings
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.leases import Lease, Pending
from leasekeeper.core.retry_budget import RetryBudget
from schemas.job import AttemptError, Job
from schemas.vocabulary import DeadLetterReason, ErrorClass


class FailurePath:
    def __init__(
        self,
        *,
        config: CoreSettings,
        budget: RetryBudget,
        rng: random.Random,
        clock: Callable[[], float],
        reader: JobReader | None = None,
    ) -> None:
        self._reader = reader or JobReader()
        self._config = config
        self._budget = budget
        self._rng = rng
        self._clock = clock

    def failed(
        self, lease: Lease, error: AttemptError, *, permanent: bool, retry_after_s: float = 0.0
    ) -> CopyRequest:
        """Retry after a jittered delay (within the retry budget), or dead-letter."""
        pending = lease.pending
        try:
            before = self._reader.full(pending)
        except Exception as exc:  # DecodeError, or the registry's SchemaUnavailable
            return self._reader.unreadable(
                pending, exc, why="retry or dead letter",
                again=lambda: self.failed(lease, error, permanent=permanent,
                                          retry_after_s=retry_after_s),
            )  # fmt: skip
        # Attempts made so far include claims whose worker died before settling.
        job = replace(before, attempt=lease.attempt, errors=(*before.errors, error))
        policy = self._config.retries.for_job(job.type, job.max_attempts)
        decision = policy.decide(
            attempt=lease.attempt,
            error_class=error.error_class,
            permanent=permanent,
            retry_after_s=retry_after_s,
            previous_delay_s=_previous_delay_s(before),
            rng=self._rng,
        )
        if not decision.retry:
            reason = DeadLetterReason(decision.reason.value)
            return dead_letter(pending, job, reason, error.message)
        delay_s = decision.delay_s + self._budget.admit_retry()
        run_at_ms = now_ms(self._clock) + int(delay_s * 1000)
        return CopyRequest(
            kind=CopyKind.RETRY,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            job=replace(job, run_at_ms=run_at_ms),
            delay_s=delay_s,
        )

    def crashed(self, pending: Pending) -> CopyRequest:
        """A job claimed ``max_attempts`` times without a settlement: its worker died each
        time (a poison pill). It goes to the DLQ instead of looping."""
        try:
            job = self._reader.full(pending)
        except Exception as exc:  # DecodeError, or the registry's SchemaUnavailable
            return self._reader.unreadable(pending, exc, why="dead letter",
                                           again=lambda: self.crashed(pending))  # fmt: skip
        note = (
            f"claimed {job.max_attempts} times without a settlement "
            "(the worker died or lost its lease each time)"
        )
        return dead_letter(pending, job, DeadLetterReason.ATTEMPTS_EXHAUSTED, note)

    def overdue(self, lease: Lease, now: float) -> AttemptError | None:
        """Why the reaper takes a lease back (``now`` is monotonic): expired, or running
        past timeout_s (a job waiting in its worker's prefetch is not running yet)."""
        job = lease.pending.job
        running_s = now - lease.started_at
        if lease.started and running_s > job.timeout_s + self._config.timeout_grace_s:
            error_class = ErrorClass.JOB_TIMEOUT
            message = f"ran longer than timeout_s={job.timeout_s:g}s (taken back by the reaper)"
        elif lease.deadline < now:
            error_class = ErrorClass.LEASE_EXPIRED
            message = f"lease expired after {lease.lease_s:g}s without ack or heartbeat"
        else:
            return None
        return AttemptError(
            attempt=lease.attempt,
            at_ms=now_ms(self._clock),
            worker=lease.worker,
            error_class=error_class.value,
            message=message,
            traceback="",
        )

    def unknown_type(self, pending: Pending, handled: frozenset[str], now: int) -> CopyRequest:
        """A job no connected worker runs, after the grace: straight to the DLQ."""
        try:
            job = self._reader.full(pending)
        except Exception as exc:  # DecodeError, or the registry's SchemaUnavailable
            return self._reader.unreadable(
                pending, exc, why="dead letter",
                again=lambda: self.unknown_type(pending, handled, now),
            )  # fmt: skip
        message = (
            f"no connected worker runs job type {job.type!r} (waited "
            f"{self._config.unknown_type_grace_s:g}s; workers run: {', '.join(sorted(handled))})"
        )
        error = AttemptError(
            attempt=job.attempt,
            at_ms=now,
            worker="",
            error_class=ErrorClass.UNKNOWN_JOB_TYPE.value,
            message=message,
            traceback="",
        )
        dead = replace(job, errors=(*job.errors, error))
        return dead_letter(pending, dead, DeadLetterReason.UNKNOWN_JOB_TYPE, message)


def dead_letter(pending: Pending, job: Job, reason: DeadLetterReason, detail: str) -> CopyRequest:
    return CopyRequest(
        kind=CopyKind.DEAD,
        source=pending.tp,
        offset=pending.offset,
        generation=pending.generation,
        job=job,
        reason=reason,
        detail=detail,
    )


def _previous_delay_s(job: Job) -> float | None:
    """The delay before this attempt (decorrelated jitter grows from it), if it had one."""
    if not job.errors or job.run_at_ms <= 0:
        return None
    delay_ms = job.run_at_ms - job.errors[-1].at_ms
    return delay_ms / 1000 if delay_ms > 0 else None
