"""A retry-storm simulator: many clients retrying against a dependency that comes back.

``clients`` jobs all fail at t=0 because a dependency is down for ``outage_s``
seconds; after that it serves at most ``capacity`` calls per ``bucket_s`` bucket
and fails the rest. Every failed call is retried after the delay a
:class:`~leasekeeper.core.retry_policy.RetryPolicy` picks. The result is the load the
dependency sees per bucket: without jitter the clients stay synchronised and
hit it in waves far above its capacity; with jitter the load after recovery
stays close to what it can serve. It is the reference for the system-level
storm test and for choosing a policy. Pure and deterministic for a given seed.

The simulator ignores ``max_attempts`` (every client keeps retrying until it
succeeds or the horizon ends): giving up would hide the load the policy causes.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from leasekeeper.core.retry_policy import RetryPolicy

__all__ = ["StormResult", "StormScenario", "simulate"]


@dataclass(frozen=True, kw_only=True)
class StormScenario:
    """The outage: who fails, for how long, and what the dependency serves afterwards."""

    clients: int = 2000
    outage_s: float = 10.0
    capacity: int = 20  # calls served per bucket once the dependency is back
    bucket_s: float = 0.5
    horizon_s: float = 600.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.clients < 1 or self.capacity < 1:
            raise ValueError("clients and capacity must be >= 1")
        if not 0 < self.bucket_s <= self.horizon_s:
            raise ValueError("need 0 < bucket_s <= horizon_s")


@dataclass(frozen=True, kw_only=True)
class StormResult:
    """The load the dependency saw, per bucket, and how long the storm lasted."""

    calls_per_bucket: tuple[int, ...]
    peak_after_recovery: int  # most calls in one bucket once the outage ended
    total_calls: int
    failed_calls: int
    all_done_s: float | None  # end of the bucket of the last success; None past the horizon
    still_failing: int  # clients without a success at the horizon


@dataclass(order=True)
class _Call:
    at_s: float
    client: int
    attempt: int  # calls already made by this client before this one
    previous_delay_s: float | None


def simulate(policy: RetryPolicy, scenario: StormScenario) -> StormResult:
    """Run the scenario with ``policy``; the same inputs always give the same result."""
    rng = random.Random(scenario.seed)
    buckets = math.ceil(scenario.horizon_s / scenario.bucket_s)
    calls = [0] * buckets
    served = [0] * buckets
    queue = [_Call(0.0, client, 0, None) for client in range(scenario.clients)]
    heapq.heapify(queue)
    failed = 0
    last_success_bucket: int | None = None
    while queue and queue[0].at_s < scenario.horizon_s:
        call = heapq.heappop(queue)
        bucket = int(call.at_s / scenario.bucket_s)
        calls[bucket] += 1
        if call.at_s >= scenario.outage_s and served[bucket] < scenario.capacity:
            served[bucket] += 1
            last_success_bucket = bucket
            continue
        failed += 1
        attempt = call.attempt + 1
        delay = policy.delay_s(attempt=attempt, previous_delay_s=call.previous_delay_s, rng=rng)
        heapq.heappush(queue, _Call(call.at_s + delay, call.client, attempt, delay))
    recovered = math.ceil(scenario.outage_s / scenario.bucket_s)
    done_at = None
    if not queue and last_success_bucket is not None:
        done_at = (last_success_bucket + 1) * scenario.bucket_s
    return StormResult(
        calls_per_bucket=tuple(calls),
        peak_after_recovery=max(calls[recovered:], default=0),
        total_calls=sum(calls),
        failed_calls=failed,
        all_done_s=done_at,
        still_failing=len(queue),
    )
