"""Fair dispatch across tenants of equal weight: a backlog never starves a tenant with
ready work (the ready window's policy, ``WeightedFair``, in one class)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from leasekeeper.fairness.weighted import WeightedFair


def fair() -> WeightedFair[Any]:
    return WeightedFair(klass=lambda item: "default")


def test_one_tenants_backlog_does_not_hold_back_another() -> None:
    policy = fair()
    for i in range(1000):
        policy.push("noisy", f"noisy-{i}")
    policy.push("quiet", "quiet-0")
    first_two = [policy.pop(), policy.pop()]
    assert "quiet-0" in first_two


def test_each_tenant_keeps_its_own_order() -> None:
    policy = fair()
    for i in range(3):
        policy.push("a", f"a{i}")
        policy.push("b", f"b{i}")
    popped = [policy.pop() for _ in range(6)]
    assert [p for p in popped if p and p.startswith("a")] == ["a0", "a1", "a2"]
    assert policy.pop() is None
    assert len(policy) == 0


def test_remove_if_drops_matching_items_only() -> None:
    policy = fair()
    for i in range(6):
        policy.push(f"t{i % 2}", (i % 3, f"job{i}"))
    removed = policy.remove_if(lambda item: item[0] == 0)
    assert sorted(r[1] for r in removed) == ["job0", "job3"]
    assert len(policy) == 4
    assert all(item[0] != 0 for item in policy)


def test_push_front_puts_a_released_job_first_for_its_tenant() -> None:
    policy = fair()
    policy.push("a", "a1")
    policy.push_front("a", "a0")
    assert policy.pop() == "a0"


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers()), min_size=1, max_size=300))
def test_no_tenant_with_ready_work_waits_more_than_one_round(
    items: list[tuple[str, int]],
) -> None:
    policy = fair()
    for tenant, value in items:
        policy.push(tenant, (tenant, value))
    tenants = {t for t, _ in items}
    waited = dict.fromkeys(tenants, 0)
    while len(policy):
        item = policy.pop()
        assert item is not None
        remaining = {t for t, _ in policy}
        for tenant in tenants:
            waited[tenant] = 0 if tenant == item[0] else waited[tenant] + 1
            if tenant in remaining:
                # a tenant that still has work is served within one round of the others
                assert waited[tenant] < len(tenants)
