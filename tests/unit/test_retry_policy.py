"""Retry policy, delay tiers and retry budget: bounds, distributions and decisions."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobcore.plain import plain
from jobcore.topics import QueueTopics
from leasekeeper.core.retry_policy import (
    DelayTiers,
    Jitter,
    RetryBudget,
    RetryDecision,
    RetryPolicies,
    RetryPolicy,
    RetryReason,
    parse_duration,
)
from schemas.job import DeadLetterReason

DRAWS = 10_000


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def draws(policy: RetryPolicy, attempt: int, previous: float | None = None) -> list[float]:
    rng = random.Random(7)
    return [
        policy.delay_s(attempt=attempt, previous_delay_s=previous, rng=rng) for _ in range(DRAWS)
    ]


# -- formulas and bounds --------------------------------------------------------


def test_exponential_doubles_from_base_and_stops_at_cap() -> None:
    policy = RetryPolicy(base_s=0.5, cap_s=10.0)
    assert [policy.exponential_s(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert policy.exponential_s(10_000) == 10.0  # no float overflow


@pytest.mark.parametrize("attempt", [1, 3, 12])
def test_full_jitter_stays_within_zero_and_exp(attempt: int) -> None:
    policy = RetryPolicy(jitter=Jitter.FULL)
    exp = policy.exponential_s(attempt)
    assert all(0 <= d <= exp for d in draws(policy, attempt))


def test_full_jitter_is_uniform_over_zero_to_exp() -> None:
    """Kolmogorov-Smirnov and chi-square against uniform(0, exp), fixed seed."""
    policy = RetryPolicy(jitter=Jitter.FULL)
    exp = policy.exponential_s(5)
    sample = sorted(d / exp for d in draws(policy, 5))
    n = len(sample)
    ks = max(max((i + 1) / n - x, x - i / n) for i, x in enumerate(sample))
    assert ks < 1.95 / math.sqrt(n)  # the 0.1 % critical value
    bins = 20
    counts = [0] * bins
    for x in sample:
        counts[min(bins - 1, int(x * bins))] += 1
    expected = n / bins
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < 43.82  # 19 degrees of freedom, p = 0.001
    # Spread, not clustered: every tenth of the range holds about a tenth.
    assert all(
        0.08 < sum(1 for x in sample if k / 10 <= x < (k + 1) / 10) / n < 0.12 for k in range(10)
    )


@pytest.mark.parametrize("attempt", [1, 4, 20])
def test_equal_jitter_never_waits_less_than_half_exp(attempt: int) -> None:
    policy = RetryPolicy(jitter=Jitter.EQUAL)
    exp = policy.exponential_s(attempt)
    sample = draws(policy, attempt)
    assert all(exp / 2 <= d <= exp for d in sample)
    assert max(sample) - min(sample) > exp / 2 * 0.99  # it does use the upper half


@pytest.mark.parametrize(
    ("previous", "cap"), [(None, 3600.0), (1.0, 3600.0), (40.0, 3600.0), (40.0, 50.0)]
)
def test_decorrelated_jitter_stays_within_base_and_three_times_previous(
    previous: float | None, cap: float
) -> None:
    policy = RetryPolicy(jitter=Jitter.DECORRELATED, base_s=1.0, cap_s=cap)
    upper = min(cap, 3 * (previous if previous is not None else policy.base_s))
    sample = draws(policy, 3, previous)
    assert all(policy.base_s <= d <= upper for d in sample)


def test_decorrelated_jitter_with_a_previous_delay_below_base_waits_base() -> None:
    policy = RetryPolicy(jitter=Jitter.DECORRELATED, base_s=2.0)
    assert set(draws(policy, 1, previous=0.1)) == {2.0}


def test_no_jitter_is_deterministic() -> None:
    policy = RetryPolicy(jitter=Jitter.NONE, base_s=1.0)
    assert set(draws(policy, 3)) == {8.0}
    one = policy.delay_s(attempt=3, previous_delay_s=None, rng=random.Random(1))
    other = policy.delay_s(attempt=3, previous_delay_s=None, rng=random.Random(2))
    assert one == other == 8.0


@settings(max_examples=300, deadline=None)
@given(
    jitter=st.sampled_from(list(Jitter)),
    base=st.floats(min_value=0.001, max_value=100),
    cap_factor=st.floats(min_value=1, max_value=10_000),
    attempt=st.integers(min_value=0, max_value=2_000),
    previous=st.none() | st.floats(min_value=0, max_value=1e6),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_every_delay_is_finite_non_negative_and_capped(
    jitter: Jitter,
    base: float,
    cap_factor: float,
    attempt: int,
    previous: float | None,
    seed: int,
) -> None:
    policy = RetryPolicy(base_s=base, cap_s=base * cap_factor, jitter=jitter)
    delay = policy.delay_s(attempt=attempt, previous_delay_s=previous, rng=random.Random(seed))
    assert math.isfinite(delay)
    assert 0 <= delay <= policy.cap_s
    if jitter is Jitter.DECORRELATED:
        assert delay >= min(policy.base_s, policy.cap_s)


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError, match="base_s"):
        RetryPolicy(base_s=0)
    with pytest.raises(ValueError, match="cap_s"):
        RetryPolicy(base_s=2, cap_s=1)
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


# -- decisions -------------------------------------------------------------------


def decide(
    policy: RetryPolicy,
    *,
    attempt: int = 1,
    error_class: str = "TimeoutError",
    permanent: bool = False,
    retry_after_s: float = 0.0,
) -> RetryDecision:
    return policy.decide(
        attempt=attempt,
        error_class=error_class,
        permanent=permanent,
        retry_after_s=retry_after_s,
        previous_delay_s=None,
        rng=random.Random(3),
    )


def test_an_ordinary_failure_retries_with_the_jittered_delay() -> None:
    policy = RetryPolicy(jitter=Jitter.FULL)
    decision = policy.decide(
        attempt=2,
        error_class="TimeoutError",
        permanent=False,
        retry_after_s=0.0,
        previous_delay_s=None,
        rng=random.Random(3),
    )
    expected = policy.delay_s(attempt=2, previous_delay_s=None, rng=random.Random(3))
    assert decision.retry
    assert decision.reason is RetryReason.RETRY
    assert decision.delay_s == expected


def test_retry_after_wins_over_the_formula_even_beyond_the_cap() -> None:
    policy = RetryPolicy(jitter=Jitter.NONE, cap_s=60.0)
    decision = decide(policy, retry_after_s=7.5)
    assert decision == decide(policy, retry_after_s=7.5)
    assert decision.delay_s == 7.5
    assert decide(policy, retry_after_s=600.0).delay_s == 600.0


def test_permanent_flag_and_permanent_classes_never_retry() -> None:
    policy = RetryPolicy()
    flagged = decide(policy, permanent=True, retry_after_s=5.0)
    assert flagged == decide(policy, permanent=True)
    assert flagged.retry is False
    assert DeadLetterReason(flagged.reason) is DeadLetterReason.PERMANENT_ERROR
    for name in ("Permanent", "PayloadDecodeError", "UnknownJobType", "ValidationError"):
        decision = decide(policy, error_class=name, retry_after_s=5.0)
        assert decision.retry is False, name
    custom = RetryPolicy(permanent_errors=frozenset({"CardDeclined"}))
    assert decide(custom, error_class="CardDeclined").retry is False
    assert decide(custom, error_class="Permanent").retry is True


@given(attempt=st.integers(min_value=1, max_value=50), max_attempts=st.integers(1, 20))
def test_attempts_exhausted_exactly_at_max_attempts(attempt: int, max_attempts: int) -> None:
    policy = RetryPolicy(max_attempts=max_attempts)
    decision = decide(policy, attempt=attempt, retry_after_s=1.0)
    assert decision.retry is (attempt < max_attempts)
    if attempt >= max_attempts:
        assert DeadLetterReason(decision.reason) is DeadLetterReason.ATTEMPTS_EXHAUSTED


def test_a_jobs_max_attempts_overrides_the_policy_default() -> None:
    policy = RetryPolicy(max_attempts=8)
    assert policy.for_job(8) is policy
    assert decide(policy.for_job(3), attempt=3).retry is False
    assert decide(policy.for_job(20), attempt=10).retry is True


def test_policies_by_job_type_fall_back_to_the_default() -> None:
    slow = RetryPolicy(base_s=30.0, jitter=Jitter.EQUAL)
    policies = RetryPolicies(by_type={"call_partner": slow})
    assert policies.for_type("call_partner") is slow
    assert policies.for_type("send_receipt") == RetryPolicy()
    assert policies.for_job("call_partner", 3) == RetryPolicy(
        base_s=30.0, jitter=Jitter.EQUAL, max_attempts=3
    )


# -- delay tiers -----------------------------------------------------------------


def test_tier_names_parse_to_seconds() -> None:
    tiers = DelayTiers()
    assert tiers.names == ("1s", "10s", "1m", "10m", "1h")
    assert tiers.seconds == (1.0, 10.0, 60.0, 600.0, 3600.0)
    assert parse_duration("500ms") == 0.5
    assert parse_duration("2d") == 172_800
    assert DelayTiers.parse("5s, 30s,5m").seconds == (5.0, 30.0, 300.0)


@pytest.mark.parametrize("bad", ["", "10", "1.5s", "10S", "0s", "1w", "1 s", "-1s", "1s/x"])
def test_invalid_tier_names_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        DelayTiers(names=(bad,))


def test_tiers_must_increase() -> None:
    with pytest.raises(ValueError, match="increasing"):
        DelayTiers(names=("1m", "60s"))
    with pytest.raises(ValueError, match="at least one"):
        DelayTiers(names=())


@pytest.mark.parametrize(
    ("delay", "tier"),
    [(0.2, "1s"), (1.0, "1s"), (9.99, "1s"), (10.0, "10s"), (59, "10s"), (60, "1m"),
     (3599, "10m"), (3600, "1h"), (86_400, "1h")],
)  # fmt: skip
def test_tier_for_is_the_largest_tier_not_longer_than_the_delay(delay: float, tier: str) -> None:
    assert DelayTiers().tier_for(delay) == tier


def test_tier_topic_names_are_retry_topics_of_the_queue() -> None:
    topics = DelayTiers(names=("1s", "1m")).topics(QueueTopics(queue="emails"))
    assert topics == ("jobs.emails.retry.1s", "jobs.emails.retry.1m")


def test_a_long_delay_hops_through_the_largest_tier_until_due() -> None:
    """A job due in 2.5 h: 1h, 1h, then 10m, then 10m... then shorter tiers, then ready."""
    tiers = DelayTiers()
    clock = Clock(now=0.0)
    run_at_ms = int(2.5 * 3600 * 1000)
    path: list[str] = []
    hop = tiers.next_hop(run_at_ms, int(clock() * 1000))
    while hop is not None:
        path.append(hop)
        produced_at_ms = int(clock() * 1000)
        release = tiers.release_at_ms(tier=hop, produced_at_ms=produced_at_ms, run_at_ms=run_at_ms)
        assert release > produced_at_ms
        clock.now = release / 1000  # the tier's consumer waits until then
        hop = tiers.next_hop(run_at_ms, int(clock() * 1000))
    assert path == ["1h", "1h", "10m", "10m", "10m"]
    assert clock() * 1000 == run_at_ms  # released exactly when due


def test_a_delay_shorter_than_the_smallest_tier_is_released_at_run_at() -> None:
    tiers = DelayTiers()
    assert tiers.next_hop(run_at_ms=1_300, now_ms=1_000) == "1s"
    assert tiers.release_at_ms(tier="1s", produced_at_ms=1_000, run_at_ms=1_300) == 1_300
    assert tiers.next_hop(run_at_ms=1_000, now_ms=1_000) is None
    assert tiers.next_hop(run_at_ms=900, now_ms=1_000) is None


@settings(max_examples=300, deadline=None)
@given(delay_ms=st.integers(min_value=1, max_value=30 * 86_400_000))
def test_every_delay_ends_due_within_a_bounded_number_of_hops(delay_ms: int) -> None:
    tiers = DelayTiers()
    now, run_at = 0, delay_ms
    hops = 0
    while (hop := tiers.next_hop(run_at, now)) is not None:
        assert tiers.seconds_of(hop) * 1000 <= max(run_at - now, 1000)
        now = tiers.release_at_ms(tier=hop, produced_at_ms=now, run_at_ms=run_at)
        hops += 1
    assert now == run_at
    assert hops <= delay_ms // 3_600_000 + 4 * 9 + 1


# -- retry budget ----------------------------------------------------------------


def test_budget_admits_its_share_then_defers_never_drops() -> None:
    clock = Clock()
    budget = RetryBudget(share=0.1, window_s=60, bucket_s=1, min_retries=1, clock=clock)
    budget.record_first_attempt(200)  # allowance: 20 retries per window
    extras = [budget.admit_retry() for _ in range(50)]
    assert extras[:20] == [0.0] * 20
    assert all(e > 0 and math.isfinite(e) for e in extras[20:])
    assert extras[20:] == sorted(extras[20:])
    snap = budget.snapshot()
    assert (snap.retries_admitted, snap.retries_deferred) == (20, 30)
    assert snap.first_attempts_in_window == 200
    assert snap.allowed_in_window == 20
    assert snap.retries_in_window + snap.retries_scheduled_ahead == 50
    assert snap.longest_deferral_s == max(extras)


def test_deferred_retries_never_overfill_any_window() -> None:
    clock = Clock(now=1_000.25)
    budget = RetryBudget(share=0.1, window_s=10, bucket_s=1, min_retries=1, clock=clock)
    budget.record_first_attempt(50)  # 5 per 10 s window
    times = [clock() + budget.admit_retry() for _ in range(40)]
    buckets = [math.floor(t + 1e-6) for t in times]  # windows are whole buckets
    for b in buckets:
        assert sum(1 for u in buckets if b - 10 < u <= b) <= 5
    assert max(times) - clock() < 80  # 40 retries at 5 per 10 s: within 8 windows


def test_quiet_queue_still_retries_up_to_the_floor() -> None:
    budget = RetryBudget(min_retries=3, clock=Clock())
    assert [budget.admit_retry() for _ in range(4)][:3] == [0.0, 0.0, 0.0]


def test_budget_frees_up_as_the_window_slides() -> None:
    clock = Clock()
    budget = RetryBudget(share=0.5, window_s=10, bucket_s=1, min_retries=1, clock=clock)
    budget.record_first_attempt(4)  # 2 per window
    assert [budget.admit_retry() for _ in range(2)] == [0.0, 0.0]
    assert budget.admit_retry() > 0
    clock.now += 30
    budget.record_first_attempt(4)
    assert budget.admit_retry() == 0.0
    assert plain(budget.snapshot())["retries_in_window"] == 1


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("first"), st.integers(1, 500)),
            st.tuples(st.just("tick"), st.floats(0, 30)),
            st.tuples(st.just("retry"), st.just(0)),
        ),
        max_size=200,
    )
)
def test_every_retry_is_admitted_with_a_finite_non_negative_delay(
    ops: list[tuple[str, float]],
) -> None:
    clock = Clock()
    budget = RetryBudget(clock=clock)
    retries = 0
    for op, value in ops:
        if op == "first":
            budget.record_first_attempt(int(value))
        elif op == "tick":
            clock.now += value
        else:
            extra = budget.admit_retry()
            assert 0 <= extra < math.inf
            retries += 1
    snap = budget.snapshot()
    assert snap.retries_admitted + snap.retries_deferred == retries


def test_invalid_budgets_are_refused() -> None:
    with pytest.raises(ValueError, match="share"):
        RetryBudget(share=0)
    with pytest.raises(ValueError, match="bucket_s"):
        RetryBudget(window_s=1, bucket_s=2)
    with pytest.raises(ValueError, match="min_retries"):
        RetryBudget(min_retries=0)
