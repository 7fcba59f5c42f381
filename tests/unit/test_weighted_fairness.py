"""The weighted dispatch policy: class weights, turns given away, caps, WFQ by cost (issue 10)."""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.fairness.weighted import TenantPolicy, WeightedFair
from schemas.job import Job

TP = TopicPart("jobs.q", 0)


@dataclass(frozen=True, kw_only=True)
class Item:
    tenant: str
    n: int
    klass: str = "default"
    cost_s: float = 0.01
    kind: str = "noop"


def policy(tenants: TenantPolicy | None = None) -> WeightedFair[Item]:
    return WeightedFair(klass=lambda i: i.klass, kind=lambda i: i.kind, tenants=tenants)


def fill(p: WeightedFair[Item], tenant: str, count: int, **fields: object) -> None:
    for n in range(count):
        p.push(tenant, Item(tenant=tenant, n=n, **fields))  # type: ignore[arg-type]


def test_classes_are_served_by_weight_6_3_1() -> None:
    p = policy()
    for klass in ("critical", "default", "bulk"):
        fill(p, f"t-{klass}", 200, klass=klass)
    served = Counter(item.klass for item in (p.pop() for _ in range(100)) if item is not None)
    assert served == {"critical": 60, "default": 30, "bulk": 10}


def test_a_class_with_nothing_ready_gives_its_turns_away() -> None:
    p = policy()
    fill(p, "t", 50, klass="bulk")
    assert [item.klass for item in (p.pop() for _ in range(50)) if item] == ["bulk"] * 50
    assert p.pop() is None


def test_a_critical_job_behind_a_bulk_backlog_goes_next() -> None:
    p = policy()
    fill(p, "flood", 10_000, klass="bulk")
    for _ in range(3):
        p.pop()
    p.push("reset", Item(tenant="reset", n=0, klass="critical"))
    first = p.pop()
    assert first is not None and first.klass == "critical"


def test_an_unknown_class_is_served_as_default() -> None:
    p = policy()
    p.push("t", Item(tenant="t", n=0, klass="nonesuch"))
    assert p.classes()["default"] == 1 and p.pop() is not None


def test_a_tenant_at_its_cap_is_skipped_and_the_others_served() -> None:
    p = policy(TenantPolicy(default_cap=2, caps={"vip": 5}))
    fill(p, "busy", 10)
    fill(p, "quiet", 3)
    served = [p.pop(skip={"busy"}) for _ in range(4)]
    assert [i.tenant if i else None for i in served] == ["quiet", "quiet", "quiet", None]
    assert p.pop() is not None
    assert TenantPolicy(default_cap=2, caps={"vip": 5}).cap("vip") == 5


def test_each_tenant_keeps_its_own_order_and_a_release_goes_back_in_front() -> None:
    p = policy()
    fill(p, "a", 5)
    fill(p, "b", 5)
    taken = [p.pop() for _ in range(4)]
    released = next(i for i in taken if i is not None and i.tenant == "a")
    p.push_front("a", released)
    rest = [i for i in (p.pop() for _ in range(20)) if i is not None]
    assert [i.n for i in rest if i.tenant == "a"] == sorted(i.n for i in rest if i.tenant == "a")
    assert len(p) == 0 and p.tenants() == {}


def test_kinds_filter_and_removal_keep_the_counts() -> None:
    p = policy()
    fill(p, "a", 3, kind="email")
    fill(p, "b", 3, kind="resize")
    assert p.has_any(frozenset({"email"})) and not p.has_any(frozenset({"video"}))
    item = p.pop(accept=lambda i: i.kind == "resize")
    assert item is not None and item.tenant == "b"
    removed = p.remove_if(lambda i: i.tenant == "a")
    assert len(removed) == 3 and not p.has_any(frozenset({"email"}))
    assert len(p) == 2 and sorted(i.n for i in p) == [1, 2]


def worker_time(p: WeightedFair[Item], workers: int, horizon_s: float) -> Counter[str]:
    """Run ``workers`` simulated workers on a fake clock until ``horizon_s``; each
    settlement reports the handler's cost. Returns worker seconds per tenant."""
    busy: Counter[str] = Counter()
    free = [(0.0, w) for w in range(workers)]
    while free:
        now, w = heapq.heappop(free)
        if now >= horizon_s:
            continue
        item = p.pop()
        assert item is not None
        busy[item.tenant] += item.cost_s
        p.settled(item.tenant, item.cost_s)
        p.push(item.tenant, item)  # the backlog never runs dry
        heapq.heappush(free, (now + item.cost_s, w))
    return busy


def test_equal_weights_get_equal_worker_time_not_equal_job_counts() -> None:
    p = policy()
    fill(p, "slow", 50, cost_s=0.100)
    fill(p, "fast", 50, cost_s=0.010)
    busy = worker_time(p, workers=4, horizon_s=60.0)
    assert abs(busy["slow"] - busy["fast"]) <= 0.2 * max(busy.values()), busy


def test_worker_time_follows_tenant_weights() -> None:
    p = policy(TenantPolicy(weights={"gold": 3.0}))
    fill(p, "gold", 50, cost_s=0.05)
    fill(p, "std", 50, cost_s=0.05)
    busy = worker_time(p, workers=4, horizon_s=60.0)
    assert 2.4 <= busy["gold"] / busy["std"] <= 3.6, busy


@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=60))
def test_no_tenant_with_ready_work_is_starved(order: list[str]) -> None:
    """Every tenant with ready work is served within (tenants) pops, whatever came before."""
    p = policy()
    for n, tenant in enumerate(order):
        p.push(tenant, Item(tenant=tenant, n=n))
    waiting = set(order)
    for _ in range(len(waiting)):
        item = p.pop()
        assert item is not None
        waiting.discard(item.tenant)
    assert not waiting


def engine_job(i: int, tenant: str, klass: str = "default") -> Job:
    return Job(job_id=f"{tenant}-{i}", queue="q", tenant_id=tenant, type="noop", payload=b"",
               created_at_ms=0, priority_class=klass)  # fmt: skip


def test_the_cap_holds_across_the_workers_of_one_leasekeeper(tmp_path: Path) -> None:
    config = EngineConfig(tenants=TenantPolicy(default_cap=2, caps={"b": 1}))
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config)
    engine.partitions.assign(TP, -1001)
    for i in range(6):
        engine.fetch.offer(TP, i, engine_job(i, "a" if i < 4 else "b"), b"x")
    first = engine.workers.claim("w1", 10, wait_s=0)
    assert len(first) == 3, "two of a (its cap), one of b (its own cap)"
    assert engine.workers.claim("w2", 10, wait_s=0) == []
    engine.workers.settle([Settlement(lease_id=first[0].lease_id, token=first[0].token,
                              outcome=SettleKind.ACK, run_s=0.05)])  # fmt: skip
    assert len(engine.workers.claim("w2", 10, wait_s=0)) == 1


def test_a_critical_job_behind_a_bulk_backlog_is_claimed_first(tmp_path: Path) -> None:
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig())
    engine.partitions.assign(TP, -1001)
    for i in range(200):
        engine.fetch.offer(TP, i, engine_job(i, "flood", "bulk"), b"x")
    engine.fetch.offer(TP, 200, engine_job(0, "reset", "critical"), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    assert grant.lease_id == TP.lease_id(200)


def test_a_settlements_run_time_is_charged_to_its_tenant(tmp_path: Path) -> None:
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig())
    engine.partitions.assign(TP, -1001)
    for i, tenant in enumerate(["a", "a", "b", "b"]):
        engine.fetch.offer(TP, i, engine_job(i, tenant), b"x")
    (first,) = engine.workers.claim("w", 1, wait_s=0)
    assert first.lease_id == TP.lease_id(0)
    engine.workers.settle([Settlement(lease_id=first.lease_id, token=first.token,
                              outcome=SettleKind.ACK, run_s=1.0)])  # fmt: skip
    rest = [g.lease_id for g in engine.workers.claim("w", 2, wait_s=0)]
    assert rest == [TP.lease_id(2), TP.lease_id(3)], "a's one second buys b two turns"
