"""What the leasekeeper tells a person in its log: retries and dead letters as they
happen (a few a minute at most), and assignments as a line one can read.

Pure formatting and a rate limit with an injected clock, so both have unit tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from leasekeeper.core.copies import CopyKind, CopyRequest

__all__ = ["RateLimit", "copy_line", "partitions_line"]


@dataclass(frozen=True, kw_only=True)
class Allowance:
    """Whether to log now, and how many lines were held back since the last one."""

    log: bool
    suppressed: int = 0


class RateLimit:
    """At most ``per_window`` lines per ``window_s``; the next line after a quiet spell
    says how many were held back, so a retry storm costs a few lines, not thousands."""

    def __init__(
        self,
        *,
        per_window: int = 10,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_window = per_window
        self._window_s = window_s
        self._clock = clock
        self._window_start = -float("inf")
        self._used = 0
        self._suppressed = 0

    def allow(self) -> Allowance:
        now = self._clock()
        if now - self._window_start >= self._window_s:
            self._window_start = now
            self._used = 0
        if self._used >= self._per_window:
            self._suppressed += 1
            return Allowance(log=False)
        self._used += 1
        held, self._suppressed = self._suppressed, 0
        return Allowance(log=True, suppressed=held)


def copy_line(request: CopyRequest, topic: str) -> str | None:
    """One line for a retry or a dead letter now durable in ``topic``; None for the
    copies nobody needs to hear about (tier hops, dedupe claims)."""
    job = request.job
    last = job.errors[-1] if job is not None and job.errors else None
    cause = f"{last.error_class}: {last.message}"[:200] if last is not None else ""
    if request.kind is CopyKind.RETRY and job is not None:
        return (
            f"retrying job {job.job_id} ({job.type}, tenant {job.tenant_id}) after attempt "
            f"{job.attempt} of {job.max_attempts} in {request.delay_s:.1f}s via {topic}"
            + (f": {cause}" if cause else "")
        )
    if request.kind is CopyKind.DEAD and job is not None:
        return (
            f"dead-lettered job {job.job_id} ({job.type}, tenant {job.tenant_id}) to {topic}: "
            f"{request.reason}" + (f"; last error {cause}" if cause else "")
        )
    if request.kind is CopyKind.DEAD_RAW:
        source = f"{request.source.topic}/{request.source.partition}/{request.offset}"
        return f"dead-lettered undecodable record {source} to {topic}: {request.detail}"[:300]
    return None


def partitions_line(assigned: Iterable[tuple[str, int]]) -> str:
    """``6 partitions: jobs.emails 0-1, jobs.emails.retry.1s 0-1, ...``: topics
    in order, each with its partitions as ranges, instead of one tuple per partition."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assigned:
        by_topic.setdefault(topic, []).append(partition)
    total = sum(len(p) for p in by_topic.values())
    parts = [f"{topic} {_ranges(sorted(ps))}" for topic, ps in sorted(by_topic.items())]
    return f"{total} partitions" + (": " + ", ".join(parts) if parts else "")


def _ranges(numbers: list[int]) -> str:
    spans: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return ",".join(spans)
