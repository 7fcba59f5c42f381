"""Parking: a ready job copied back to a delay tier, without spending an attempt.

A job that may not run now for a reason of its own queue, not of the job (its
type is over its rate limit), must neither fail nor wait in the window, where it
would take the room of other types and hold its partition's commit back. It is
copied, unchanged but for ``run_at``, to the delay tier that fits the wait, and
its offset resolves once that copy is durable (copy-then-resolve, like a retry):
the job lives in Kafka meanwhile, and comes back through the tier like any
delayed job. No error is added to its history and no attempt is counted.

The copy is a tier hop (``CopyKind.HOP`` with no tier named: the router picks
the largest tier not longer than the wait), so the outbox, the router and the
resolution of the source offset need nothing new.
"""

from __future__ import annotations

from dataclasses import replace

from leasekeeper.copies import CopyKind, CopyRequest
from leasekeeper.leases import Pending

# The shortest wait a parked job is given: less would only churn through Kafka.
MIN_PARK_S = 1.0


def park(pending: Pending, *, delay_s: float, now_ms: int, claims: int = 0) -> CopyRequest:
    """The copy that parks ``pending`` for ``delay_s`` (at least ``MIN_PARK_S``).
    ``claims`` are attempts this leasekeeper counted on the offset and gave back
    (a released job): carried over, as a retry carries its attempts."""
    delay_s = max(MIN_PARK_S, delay_s)
    job = replace(
        pending.job,
        attempt=pending.job.attempt + claims,
        run_at_ms=now_ms + int(delay_s * 1000),
    )
    return CopyRequest(
        kind=CopyKind.HOP,
        source=pending.tp,
        offset=pending.offset,
        generation=pending.generation,
        job=job,
        delay_s=delay_s,
    )
