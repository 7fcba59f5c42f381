"""When a failed job runs again, or whether it runs again at all (pure, no I/O).

The leasekeeper asks a :class:`RetryPolicy` once per failed attempt and gets a
:class:`RetryDecision`: retry after ``delay_s``, or dead-letter with a reason.
The delay is exponential backoff with jitter, because every job that touches a
failing dependency fails at about the same moment; without jitter they all come
back at the same moment too, in waves far above what the recovering dependency
can serve (``devtools/retry_storm.py`` measures this). Randomness comes from
a ``random.Random`` the caller passes in, so tests and the storm simulator are
deterministic with a seed.

Delay tiers (``DelayTiers``) and the retry budget (``RetryBudget``) live in
their own modules and are re-exported here: together with the policy they are
everything the retry path needs. See ``docs/retries.md``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from jobcore.delay_tiers import DEFAULT_TIERS, DelayTiers, parse_duration
from leasekeeper.core.retry_budget import RetryBudget
from schemas.vocabulary import DeadLetterReason, ErrorClass

__all__ = [
    "DEFAULT_PERMANENT_ERRORS",
    "DEFAULT_TIERS",
    "DelayTiers",
    "Jitter",
    "RetryBudget",
    "RetryDecision",
    "RetryPolicies",
    "RetryPolicy",
    "RetryReason",
    "parse_duration",
]

# Error classes that say "retrying cannot help": the handler raised Permanent,
# the payload does not decode, no handler exists for the type, or the input
# failed validation. They go to the DLQ on the first failure.
DEFAULT_PERMANENT_ERRORS = frozenset(
    {
        ErrorClass.PERMANENT.value,
        ErrorClass.PAYLOAD_DECODE_ERROR.value,
        ErrorClass.UNKNOWN_JOB_TYPE.value,
        ErrorClass.VALIDATION_ERROR.value,
    }
)


class Jitter(StrEnum):
    """How the exponential delay is randomised (formulas in ``docs/retries.md``)."""

    FULL = "full"  # uniform(0, exp): spreads retries evenly, least total work
    EQUAL = "equal"  # exp/2 + uniform(0, exp/2): a guaranteed minimum wait
    DECORRELATED = "decorrelated"  # min(cap, uniform(base, 3 * previous delay))
    NONE = "none"  # exp: synchronised waves; for tests and comparisons


class RetryReason(StrEnum):
    """Why a decision was made; the dead reasons equal ``DeadLetterReason`` values."""

    RETRY = "retry"
    ATTEMPTS_EXHAUSTED = DeadLetterReason.ATTEMPTS_EXHAUSTED.value
    PERMANENT_ERROR = DeadLetterReason.PERMANENT_ERROR.value


@dataclass(frozen=True, kw_only=True)
class RetryDecision:
    """Run the job again after ``delay_s`` seconds, or dead-letter it (``retry`` False)."""

    retry: bool
    delay_s: float
    reason: RetryReason


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Exponential backoff with jitter, a bound on attempts, and errors never retried.

    ``attempt`` everywhere means attempts made so far: 1 after the first failure.
    The un-jittered delay after attempt ``n`` is ``min(cap_s, base_s * 2**n)``,
    so with the defaults the first retry waits up to 2 s and the delay reaches
    the one-hour cap after attempt 12.
    """

    base_s: float = 1.0
    cap_s: float = 3600.0
    jitter: Jitter = Jitter.FULL
    max_attempts: int = 8
    permanent_errors: frozenset[str] = DEFAULT_PERMANENT_ERRORS

    def __post_init__(self) -> None:
        if not (self.base_s > 0 and math.isfinite(self.base_s)):
            raise ValueError(f"base_s must be a positive number, got {self.base_s}")
        if not (self.cap_s >= self.base_s and math.isfinite(self.cap_s)):
            raise ValueError(f"cap_s must be finite and >= base_s, got {self.cap_s}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        object.__setattr__(self, "jitter", Jitter(self.jitter))
        object.__setattr__(self, "permanent_errors", frozenset(self.permanent_errors))

    def for_job(self, max_attempts: int) -> RetryPolicy:
        """This policy with the job's own ``max_attempts`` (set at enqueue), which wins."""
        if max_attempts == self.max_attempts:
            return self
        return replace(self, max_attempts=max_attempts)

    def is_permanent(self, error_class: str) -> bool:
        return error_class in self.permanent_errors

    def exponential_s(self, attempt: int) -> float:
        """``min(cap_s, base_s * 2**attempt)``, without overflowing for huge attempts."""
        if attempt < 0:
            raise ValueError(f"attempt must be >= 0, got {attempt}")
        # 2**attempt overflows a float past 1023; the cap is reached long before.
        if attempt > math.log2(self.cap_s / self.base_s) + 1:
            return self.cap_s
        return min(self.cap_s, self.base_s * 2.0**attempt)

    def delay_s(self, *, attempt: int, previous_delay_s: float | None, rng: random.Random) -> float:
        """The jittered backoff after ``attempt`` attempts (Retry-After not considered)."""
        exp = self.exponential_s(attempt)
        if self.jitter is Jitter.NONE:
            return exp
        if self.jitter is Jitter.FULL:
            return rng.uniform(0.0, exp)
        if self.jitter is Jitter.EQUAL:
            return exp / 2 + rng.uniform(0.0, exp / 2)
        previous = self.base_s if previous_delay_s is None else previous_delay_s
        # A previous delay below base (a short Retry-After) must not invert the range.
        return min(self.cap_s, rng.uniform(self.base_s, max(self.base_s, previous * 3)))

    def decide(
        self,
        *,
        attempt: int,
        error_class: str,
        permanent: bool,
        retry_after_s: float,
        previous_delay_s: float | None,
        rng: random.Random,
    ) -> RetryDecision:
        """Retry or dead-letter after the failure of attempt number ``attempt``.

        In order: a permanent failure (the handler's flag, or an error class in
        ``permanent_errors``) is dead at once; ``attempt >= max_attempts`` is
        dead; a handler's ``retry_after_s > 0`` (a dependency's Retry-After) is
        the delay as given, not jittered and not capped at ``cap_s``, because
        the dependency knows its own recovery time better than our formula;
        otherwise the jittered exponential delay.
        """
        if permanent or self.is_permanent(error_class):
            return RetryDecision(retry=False, delay_s=0.0, reason=RetryReason.PERMANENT_ERROR)
        if attempt >= self.max_attempts:
            return RetryDecision(retry=False, delay_s=0.0, reason=RetryReason.ATTEMPTS_EXHAUSTED)
        if retry_after_s > 0:
            return RetryDecision(retry=True, delay_s=retry_after_s, reason=RetryReason.RETRY)
        delay = self.delay_s(attempt=attempt, previous_delay_s=previous_delay_s, rng=rng)
        return RetryDecision(retry=True, delay_s=delay, reason=RetryReason.RETRY)


@dataclass(frozen=True, kw_only=True)
class RetryPolicies:
    """The policy of each job type, falling back to ``default``.

    A slow partner API and a thumbnail resize fail differently; they should not
    share one backoff. ``for_job`` also applies the job's own ``max_attempts``.
    """

    default: RetryPolicy = field(default_factory=RetryPolicy)
    by_type: Mapping[str, RetryPolicy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A copy, so a frozen value never shares a mutable dict with its caller.
        object.__setattr__(self, "by_type", dict(self.by_type))

    def for_type(self, job_type: str) -> RetryPolicy:
        return self.by_type.get(job_type, self.default)

    def for_job(self, job_type: str, max_attempts: int) -> RetryPolicy:
        return self.for_type(job_type).for_job(max_attempts)
