"""The lease engine's settings and counters, shared by its parts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from leasekeeper.offset_metadata import MAX_SPAN
from leasekeeper.retry_policy import RetryPolicies


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    lease_s: float = 30.0
    lease_s_by_type: Mapping[str, float] = field(default_factory=dict)
    window_records: int = 10_000
    window_bytes: int = 64 * 1024 * 1024
    # How far beyond its commit a partition may be fetched: what commit metadata
    # can describe when the partition moves (see offset_metadata).
    max_span: int = MAX_SPAN
    # The reaper's backstop for a job that heartbeats but never finishes; the
    # worker enforces timeout_s itself, this catches a worker that cannot.
    timeout_grace_s: float = 5.0
    retries: RetryPolicies = field(default_factory=RetryPolicies)
    # After a (re)start, leases not known yet are answered "retry later" until the
    # partitions are back and re-read, or for this long at most.
    settle_in_max_s: float = 30.0
    # A job no connected worker can run waits this long (from the first time no
    # worker could take it) before it fails as UnknownJobType.
    unknown_type_grace_s: float = 600.0
    # A worker counts as connected this long after its last claim.
    worker_seen_s: float = 60.0

    def lease_for(self, job_type: str) -> float:
        return self.lease_s_by_type.get(job_type, self.lease_s)


@dataclass(kw_only=True)
class Counters:
    """What happened to jobs since start. ``inspect`` and metrics iterate the fields, so a
    counter added here is shown and exported without another edit."""

    acked: int = 0
    nacked: int = 0
    released: int = 0
    expired: int = 0
    retried: int = 0
    dead: int = 0
    skipped: int = 0
    cancelled: int = 0
    deduplicated: int = 0
    stale_rejected: int = 0


def now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)
