"""What a caller asks to enqueue, and how it becomes a :class:`~schemas.job.Job`.

Kept apart from the Kafka client so the rules (limits, scheduling, payload
validation) are pure functions with their own unit tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from jobcore.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_S
from jobcore.topics import QueueTopics
from schemas.codec import EnvelopeCodec
from schemas.job import Job

__all__ = ["JobRequest", "build_job"]

_INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True, kw_only=True)
class JobRequest:
    """One job to enqueue. Checked on construction, so a bad batch fails before any send."""

    queue: str
    type: str
    payload: Mapping[str, object]
    tenant_id: str
    dedupe_key: str | None = None
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    priority: int | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        QueueTopics(queue=self.queue)  # raises ValueError for a name no topic can have
        if not self.type:
            raise ValueError("type must name a job type")
        if not self.tenant_id:
            raise ValueError("tenant_id must be a non-empty string: it is the partition key")
        if self.dedupe_key == "":
            raise ValueError("dedupe_key must be None or a non-empty string")
        self._check_limits()
        self._check_schedule()

    def _check_limits(self) -> None:
        # Envelope fields are Avro ints: an out-of-range value would not round-trip.
        if not 1 <= self.max_attempts <= _INT32[1]:
            raise ValueError(
                f"max_attempts must be >= 1 (and fit an int32), got {self.max_attempts}"
            )
        if not (self.timeout_s > 0 and math.isfinite(self.timeout_s)):
            raise ValueError(
                f"timeout_s must be a positive number of seconds, got {self.timeout_s}"
            )
        if self.priority is not None and not _INT32[0] <= self.priority <= _INT32[1]:
            raise ValueError(f"priority must fit a 32-bit int, got {self.priority}")

    def _check_schedule(self) -> None:
        if self.run_at is not None and self.delay is not None:
            raise ValueError("give run_at or delay, not both")
        if self.run_at is not None and self.run_at.utcoffset() is None:
            raise ValueError("run_at must be timezone-aware (e.g. datetime.now(UTC))")
        if self.delay is not None and _seconds(self.delay) < 0:
            raise ValueError(f"delay must be >= 0, got {self.delay}")

    def delay_s(self, now: float) -> float:
        """Seconds from ``now`` (epoch seconds) until the job may run; <= 0 means now."""
        if self.run_at is not None:
            return self.run_at.timestamp() - now
        return 0.0 if self.delay is None else _seconds(self.delay)


def _seconds(delay: timedelta | float) -> float:
    return delay.total_seconds() if isinstance(delay, timedelta) else float(delay)


def build_job(request: JobRequest, *, codec: EnvelopeCodec, now: float, job_id: str) -> Job:
    """The envelope for ``request``; raises PayloadError before anything could be sent.

    Delayed jobs need the scheduling work (delay topics); until then a job that
    may not run yet is refused rather than run early.
    """
    if request.delay_s(now) > 0:
        raise NotImplementedError(
            "delayed jobs (run_at/delay in the future) are not supported yet; "
            "they arrive with the scheduling work. Enqueue when the job is due."
        )
    now_ms = int(now * 1000)
    return Job(
        job_id=job_id,
        queue=request.queue,
        tenant_id=request.tenant_id,
        type=request.type,
        payload=codec.encode_payload(request.type, request.payload),
        priority=request.priority or 0,
        run_at_ms=now_ms,
        max_attempts=request.max_attempts,
        timeout_s=float(request.timeout_s),
        dedupe_key=request.dedupe_key,
        created_at_ms=now_ms,
    )
