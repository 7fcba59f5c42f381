"""Parking: a ready job copied back to a delay tier, without spending an attempt.

A job that may not run now for a reason of its own queue, not of the job (its
type is over its rate limit, or its type's circuit breaker is open), must
neither fail nor wait in the window, where it would take the room of other
types and hold its partition's commit back (the partition pauses 16,000 offsets
past it). It is copied, unchanged but for ``run_at`` (and the claims already
counted on its offset, so a job that killed its workers cannot escape
``max_attempts`` by being parked), to the delay tier that fits the wait, and its
offset resolves as ``parked`` once that copy is durable (copy-then-resolve, like
a retry): the job lives in Kafka meanwhile, and comes back through the tier like
any delayed job. No error is added to its history and no attempt is counted.

``park`` builds the copy (``CopyKind.PARK``: routed as a retry is, to the
largest tier not longer than the wait); ``Parking`` is the engine's part that
also counts them, for the breakers. The rate limits (``limits/admission.py``) call
``park`` and count theirs per limiter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from leasekeeper.core.clocks import now_ms
from leasekeeper.core.context import Counters
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.leases import Pending
from leasekeeper.core.partition_book import PartitionBook

# The shortest wait a parked job is given: less would only churn through Kafka.
MIN_PARK_S = 1.0


def park(
    pending: Pending,
    *,
    delay_s: float,
    now_ms: int,
    claims: int = 0,
    reason: str = "",
    reader: JobReader | None = None,
) -> CopyRequest:
    """The copy that parks ``pending`` for ``delay_s`` (at least ``MIN_PARK_S``).
    ``claims`` are attempts this leasekeeper counted on the offset and gave back
    (a released job): carried over, as a retry carries its attempts. ``reason`` is
    for logs and ``describe``. ``reader`` decodes the envelope to rewrite it."""
    delay_s = max(MIN_PARK_S, delay_s)
    reader = reader or JobReader()
    try:
        full = reader.full(pending)
    except Exception as exc:  # DecodeError, or the registry's SchemaUnavailable
        # Held for the schema, it parks later with the same run_at: the wait it was
        # given ends when it would have.
        return reader.unreadable(
            pending, exc, why="park",
            again=lambda: park(pending, delay_s=delay_s, now_ms=now_ms, claims=claims,
                               reason=reason, reader=reader),
        )  # fmt: skip
    job = replace(full, attempt=full.attempt + claims, run_at_ms=now_ms + int(delay_s * 1000))
    return CopyRequest(
        kind=CopyKind.PARK,
        source=pending.tp,
        offset=pending.offset,
        generation=pending.generation,
        job=job,
        delay_s=delay_s,
        detail=reason,
    )


class Parking:
    """Parks jobs for the engine (under its lock) and counts them (``Counters.parked``)."""

    def __init__(
        self,
        *,
        book: PartitionBook,
        counters: Counters,
        clock: Callable[[], float],
        reader: JobReader | None = None,
    ) -> None:
        self._reader = reader
        self._book = book
        self._counters = counters
        self._clock = clock

    def park(self, pending: Pending, delay_s: float, reason: str) -> CopyRequest:
        """The copy that parks ``pending`` for ``delay_s`` seconds; the engine queues
        it, and the offset resolves on its delivery."""
        state = self._book.parts.get(pending.tp)
        claims = state.claims.get(pending.offset, 0) if state is not None else 0
        self._counters.parked += 1
        return park(pending, delay_s=delay_s, now_ms=now_ms(self._clock), claims=claims,
                    reason=reason, reader=self._reader)  # fmt: skip
