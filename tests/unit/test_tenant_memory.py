"""Memory follows the active tenants, not every tenant ever seen (design invariant 11).

A SaaS queue keyed by customer sees an unbounded stream of tenant ids. Each map the
dispatch keeps per tenant (the weighted fair clock and mean cost, the rate limits'
counts, the parking horizons) keeps its active tenants plus at most ``RECENT_LIMIT``
recently idle ones.
"""

from __future__ import annotations

import tracemalloc

import pytest

from leasekeeper.core.recent import RECENT_LIMIT, RecentKeys
from leasekeeper.fairness.weighted import WeightedFair
from leasekeeper.limits.rate_limit import RateLimits, rate_limit_config


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Served:
    """The weighted fair policy and the rate limits, as a leasekeeper holds them."""

    def __init__(self) -> None:
        self.fair: WeightedFair[int] = WeightedFair(
            klass=lambda item: "default", kind=lambda item: "noop"
        )
        self.clock = Clock()
        self.limits = RateLimits(rate_limit_config(tenant="100/s"), monotonic=self.clock)
        self.seen = 0

    def serve_once(self, tenants: int) -> None:
        """``tenants`` new tenants each enqueue one job, are served, and settle."""
        fair, limits, clock = self.fair, self.limits, self.clock
        for i in range(self.seen, self.seen + tenants):
            tenant = f"tenant-{i:08d}"
            fair.push(tenant, i)
            assert fair.pop() == i
            fair.settled(tenant, 0.01)
            limits.take("noop", tenant)
            clock.now += 0.011  # past one token at 100/s: the tenant's bucket is full again
            if i % 1000 == 999:
                limits.forget_idle_tenants()
        limits.forget_idle_tenants()
        self.seen += tenants


def _sizes(served: Served) -> dict[str, int]:
    fair, limits = served.fair, served.limits
    return {
        "vtime": len(fair._vtime),
        "mean_cost": len(fair._mean_cost),
        "fair idle": len(fair._idle),
        "dispatched": len(limits._dispatched),
        "buckets": len(limits._tenants),
        "limits idle": len(limits._idle),
    }


def test_tenant_maps_keep_the_recent_tenants_only() -> None:
    served = Served()
    served.serve_once(3 * RECENT_LIMIT)
    sizes = _sizes(served)
    assert all(n <= RECENT_LIMIT for n in sizes.values()), sizes
    # The most recent tenants keep what was learned of them; the oldest start afresh.
    assert "tenant-00029999" in served.fair._mean_cost
    assert "tenant-00000000" not in served.fair._vtime


def test_an_active_tenant_is_never_forgotten_and_a_recent_one_keeps_its_cost() -> None:
    fair: WeightedFair[str] = WeightedFair(klass=lambda item: "default", recent=2)
    fair.push("a", "a1")
    fair.push("a", "a2")
    assert fair.pop() == "a1"
    fair.settled("a", 1.0)  # "a" still has a ready job: active
    for tenant in ("b", "c", "d", "e"):  # four tenants go idle, past the limit of 2
        fair.push(tenant, tenant)
        assert fair.pop() == tenant
        fair.settled(tenant, 0.5)
    assert "a" in fair._vtime and "a" in fair._mean_cost, "active: kept"
    assert set(fair._mean_cost) == {"a", "d", "e"}, "the two most recently idle, and a"


def test_a_late_settlement_of_a_forgotten_tenant_stays_bounded() -> None:
    fair: WeightedFair[str] = WeightedFair(klass=lambda item: "default", recent=3)
    for i in range(10):
        fair.settled(f"never-queued-{i}", 0.5)
    assert len(fair._vtime) <= 3 and len(fair._mean_cost) <= 3


def test_recent_keys_evict_the_oldest_idle() -> None:
    recent: RecentKeys[str] = RecentKeys(2)
    assert recent.idle("a") == [] and recent.idle("b") == []
    assert recent.idle("a") == []  # touched again: now the most recent
    assert recent.idle("c") == ["b"]
    recent.active("a")
    assert "a" not in recent and len(recent) == 1
    with pytest.raises(ValueError, match="limit"):
        RecentKeys(-1)


@pytest.mark.slow
def test_a_million_tenants_served_once_leave_bounded_maps_and_memory() -> None:
    """The maps' sizes after a million tenants, and the memory the last 100,000 of
    them leave behind, traced (tracing all of them would take minutes): with one
    entry kept per tenant ever seen, that is 40-50 MB."""
    served = Served()
    served.serve_once(900_000)
    tracemalloc.start()
    try:
        served.serve_once(100_000)
        traced, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    sizes = _sizes(served)
    assert served.seen == 1_000_000
    assert all(n <= RECENT_LIMIT for n in sizes.values()), sizes
    assert traced < 5_000_000, f"{traced / 1e6:.1f} MB left by the last 100,000 tenants"
