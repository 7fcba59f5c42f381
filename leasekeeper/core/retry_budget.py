"""A queue's retry budget: retries may use only a share of its recent throughput.

Backoff spreads one job's retries out; a budget bounds all of them together, so
a dependency outage cannot turn a queue into many times its normal load. Over a
sliding window (60 one-second buckets by default) retries may use at most
``share`` (10 %) of the queue's throughput, with a floor of ``min_retries`` per
window so a quiet queue can still retry at all.

Throughput counts **first attempts dispatched** (``record_first_attempt``), not
every dispatch and not successes: counting retries would let a retry storm
raise its own allowance, and counting successes would tie the allowance to the
dependency's health rather than to the queue's normal load.

Over budget, a retry is **deferred, never dropped**: ``admit_retry`` returns an
extra delay that moves it into the first later bucket whose window still has
room, and the caller adds that to the job's backoff. A retry counts in the
bucket it is moved to, so deferred retries drain at the budgeted rate.

Not thread-safe: the leasekeeper calls it under the lock it already holds.
Time comes from an injected ``clock`` (seconds), so tests never sleep.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BudgetSnapshot", "RetryBudget"]


@dataclass(frozen=True, kw_only=True)
class BudgetSnapshot:
    """What ``leasekeeper inspect`` and metrics show of a budget."""

    share: float
    window_s: float
    first_attempts_in_window: int
    allowed_in_window: int
    retries_in_window: int
    retries_scheduled_ahead: int
    retries_admitted: int
    retries_deferred: int
    longest_deferral_s: float


# The defaults of ``leasekeeper serve --retry-budget`` and ``--retry-budget-floor``,
# defined once: the service and the CLI read them from here.
DEFAULT_SHARE = 0.10
DEFAULT_MIN_RETRIES = 60


class RetryBudget:
    """Sliding-window retry budget of one queue; see the module docstring."""

    def __init__(
        self,
        *,
        share: float = DEFAULT_SHARE,
        window_s: float = 60.0,
        bucket_s: float = 1.0,
        min_retries: int = DEFAULT_MIN_RETRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        if not 0 < bucket_s <= window_s:
            raise ValueError(f"need 0 < bucket_s <= window_s, got {bucket_s}, {window_s}")
        if min_retries < 1:
            raise ValueError(f"min_retries must be >= 1, got {min_retries}")
        self._share = share
        self._bucket_s = bucket_s
        self._width = max(1, round(window_s / bucket_s))  # buckets per window
        self._min_retries = min_retries
        self._clock = clock
        self._firsts: dict[int, int] = {}  # bucket -> first attempts dispatched
        self._slots: dict[int, int] = {}  # bucket -> retries counted there (may be ahead)
        # Every bucket from "now" up to this one was full under this allowance.
        self._frontier = (-math.inf, 0)
        self._admitted = 0
        self._deferred = 0
        self._longest_deferral_s = 0.0

    def record_first_attempt(self, count: int = 1) -> None:
        """``count`` jobs on their first attempt were dispatched: the queue's throughput."""
        bucket = self._now_bucket()
        self._firsts[bucket] = self._firsts.get(bucket, 0) + count

    def allowed(self) -> int:
        """Retries the current window may hold: ``share`` of first attempts, at least the floor."""
        return self._allowed_at(self._now_bucket())

    def admit_retry(self) -> float:
        """Count one retry; 0 when within budget, else the extra delay (s) that defers it."""
        now = self._clock()
        current = self._bucket(now)
        self._prune(current)
        allowed = self._allowed_at(current)
        bucket = self._first_bucket_with_room(current, allowed)
        self._slots[bucket] = self._slots.get(bucket, 0) + 1
        self._frontier = (bucket, allowed)
        if bucket == current:
            self._admitted += 1
            return 0.0
        extra = bucket * self._bucket_s - now
        self._deferred += 1
        self._longest_deferral_s = max(self._longest_deferral_s, extra)
        return extra

    def snapshot(self) -> BudgetSnapshot:
        current = self._now_bucket()
        self._prune(current)
        firsts = self._window_sum(self._firsts, current)
        return BudgetSnapshot(
            share=self._share,
            window_s=self._width * self._bucket_s,
            first_attempts_in_window=firsts,
            allowed_in_window=self._allowed_at(current),
            retries_in_window=self._window_sum(self._slots, current),
            retries_scheduled_ahead=sum(n for b, n in self._slots.items() if b > current),
            retries_admitted=self._admitted,
            retries_deferred=self._deferred,
            longest_deferral_s=self._longest_deferral_s,
        )

    # -- internals ------------------------------------------------------------

    def _bucket(self, now: float) -> int:
        return math.floor(now / self._bucket_s)

    def _now_bucket(self) -> int:
        return self._bucket(self._clock())

    def _allowed_at(self, bucket: int) -> int:
        firsts = self._window_sum(self._firsts, bucket)
        # The epsilon keeps 0.1 * 70 from flooring to 6 through rounding.
        return max(self._min_retries, math.floor(self._share * firsts + 1e-9))

    def _window_sum(self, counts: dict[int, int], bucket: int) -> int:
        """The total of ``counts`` over the window ending at ``bucket``: (bucket - W, bucket]."""
        return sum(counts.get(b, 0) for b in range(bucket - self._width + 1, bucket + 1))

    def _first_bucket_with_room(self, current: int, allowed: int) -> int:
        """The earliest bucket >= ``current`` whose window holds fewer than ``allowed`` retries.

        Buckets only gain retries, so buckets found full under an allowance stay
        full under any smaller one: the search resumes from the last frontier.
        """
        frontier, frontier_allowed = self._frontier
        bucket = current
        if allowed <= frontier_allowed and frontier > current:
            bucket = int(frontier)
        total = self._window_sum(self._slots, bucket)
        while total >= allowed:
            bucket += 1
            total += self._slots.get(bucket, 0) - self._slots.get(bucket - self._width, 0)
        return bucket

    def _prune(self, current: int) -> None:
        """Forget buckets no window from ``current`` on can see."""
        oldest = current - self._width + 1
        for counts in (self._firsts, self._slots):
            for bucket in [b for b in counts if b < oldest]:
                del counts[bucket]
