"""Parking: a job that must not run now goes back to a delay tier, without an attempt.

An open circuit breaker (and a rate limiter over its limit) must neither run a
job nor hold it: a job held in the window keeps its offset unresolved, so the
partition's commit stops there, and the partition pauses 16,000 offsets past
it. Parking copies the job to the delay tier that fits ``delay_s``, with its
``run_at`` set and its attempt count unchanged (plus any claims already made
on this offset, so a poison job cannot escape its bound by being parked), and
the offset resolves as ``parked`` only once that copy is delivered, as a retry
does: copy, then resolve. Nothing is dispatched, nothing is dead-lettered, and
the retry budget is not charged.

The engine's lock guards it; ``LeaseEngine.park`` is the public entry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from leasekeeper.copies import CopyKind, CopyRequest
from leasekeeper.engine_config import Counters, now_ms
from leasekeeper.leases import Pending
from leasekeeper.partition_book import PartitionBook

# A parked job waits at least this long: a shorter delay would bring it straight back.
MIN_PARK_S = 1.0


class Parking:
    def __init__(
        self, *, book: PartitionBook, counters: Counters, clock: Callable[[], float]
    ) -> None:
        self._book = book
        self._counters = counters
        self._clock = clock
        # Parked jobs per reason (e.g. "breaker"), for the metrics.
        self.by_reason: Counter[str] = Counter()

    def park(self, pending: Pending, delay_s: float, reason: str) -> CopyRequest:
        """The copy that parks ``pending`` for ``delay_s`` seconds; queue it (the engine
        does) and the offset resolves on its delivery."""
        delay_s = max(MIN_PARK_S, delay_s)
        state = self._book.parts.get(pending.tp)
        claims = state.claims.get(pending.offset, 0) if state is not None else 0
        job = replace(
            pending.job,
            attempt=pending.job.attempt + claims,
            run_at_ms=now_ms(self._clock) + int(delay_s * 1000),
        )
        self._counters.parked += 1
        self.by_reason[reason.split(":", 1)[0]] += 1
        return CopyRequest(
            kind=CopyKind.PARK,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            job=job,
            delay_s=delay_s,
            detail=reason,
        )
