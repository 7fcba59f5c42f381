"""The lease engine's configuration, as its composition root builds it.

One frozen value with every setting, the core's and the features': the service and
the tests build it in one call. The core reads its own fields through
``leasekeeper.core.context.CoreSettings``; each feature's settings are its own type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jobcore.results import MAX_RESULT_BYTES
from leasekeeper.breaker.settings import BreakerSettings
from leasekeeper.core.offset_metadata import MAX_SPAN
from leasekeeper.core.resolved_ids import DEFAULT_MAX_IDS, DEFAULT_WINDOW_S
from leasekeeper.core.retry_policy import RetryPolicies
from leasekeeper.fairness.weighted import DEFAULT_CLASS_WEIGHTS, TenantPolicy
from leasekeeper.limits.rate_limit import RateLimitConfig
from leasekeeper.ordering.values import OnDead

__all__ = ["EngineConfig"]


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    lease_s: float = 30.0
    lease_s_by_type: Mapping[str, float] = field(default_factory=dict)
    window_records: int = 10_000
    window_bytes: int = 64 * 1024 * 1024
    # How far beyond its commit a partition may be fetched: what commit metadata
    # can describe when the partition moves (see offset_metadata).
    max_span: int = MAX_SPAN
    # Leasing stops while this many finished jobs are in no commit Kafka accepted
    # (commits fail while the group coordinator is down): what a partition move
    # after a broker failure can run again stays bounded (see docs/architecture.md).
    max_uncommitted: int = 2_000
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
    # The queue's name, for the warnings the engine logs (empty in unit tests).
    queue: str = ""
    # Priority class → dispatch weight (each class also has its own topic).
    class_weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_CLASS_WEIGHTS))
    # Tenant weights (weighted fair queuing by cost) and caps (jobs running at once).
    tenants: TenantPolicy = field(default_factory=TenantPolicy)
    # Write how each job ended to jobs.Q.status (``--no-status`` turns it off for a
    # queue whose lookups are not worth a record per job: then nothing is written).
    status_records: bool = True
    # Circuit breakers per job type (see leasekeeper/breaker/policy.py, docs/breaker.md).
    breakers: BreakerSettings = field(default_factory=BreakerSettings)
    # A tenant holding more than this share of its partition's slice of a full window
    # goes to the overflow lane (see overflow_lane); 0, the default, leaves the lane
    # off: on a leasekeeper-bound drain its copies cost more than they save
    # (docs/fairness.md). ``overflow_lane.DEFAULT_SHARE`` (0.5) is the value to try.
    overflow_share: float = 0.0
    # Read past a flood: a tenant holding more than half of its partition's slice of
    # a full window has its later records there deferred (their offsets kept, the
    # records read again when it has room) so that the partition's other tenants
    # are read on (see leasekeeper/deferral, docs/fairness.md).
    defer_floods: bool = True
    # How far past its commit a partition read past a flood may be fetched at most
    # (beyond ``max_span``, and only while commit metadata describes it all).
    read_past_cap: int = 2_000_000
    # Token buckets per job type and per tenant, checked at claim time (rate_limit).
    rate_limits: RateLimitConfig = field(default_factory=RateLimitConfig)
    # Per-key ordering: when a line's head is dead-lettered, the line goes on, or
    # stays blocked until an operator replays or skips it (docs/ordering.md).
    on_dead: OnDead = OnDead.CONTINUE
    # Whether a held ordered job keeps its payload here once its lane record is durable.
    # The service keeps places only (False) and reads the job back from the lane when it
    # goes home; True serves a leasekeeper without a lane to read (the unit tests').
    lane_jobs_here: bool = True
    # The ids of jobs acked here are kept this long, this many at most, and a later
    # copy of one of them is skipped (see leasekeeper/core/resolved_ids).
    resolved_ids: int = DEFAULT_MAX_IDS
    resolved_window_s: float = DEFAULT_WINDOW_S
    # The largest result an ack may carry: the ceiling any worker may be configured up
    # to (each worker enforces its own ``--max-result-bytes``). A larger one, from a
    # worker that skipped its check, fails its job permanently (leasekeeper/core/results).
    max_result_bytes: int = MAX_RESULT_BYTES

    def lease_for(self, job_type: str) -> float:
        return self.lease_s_by_type.get(job_type, self.lease_s)
