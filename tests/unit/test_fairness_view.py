"""inspect and metrics per priority class and per tenant (issue 10, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from jobcore.plain import plain
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.fairness.weighted import TenantPolicy
from leasekeeper.views.inspect_view import fairness_lines
from leasekeeper.views.metrics import TOP_TENANTS, EngineCollector
from schemas.job import Job

TP = TopicPart("jobs.q", 0)
NOW_S = 1_000.0


def job(i: int, tenant: str, klass: str, created_ms: int) -> Job:
    return Job(job_id=f"j{i}", queue="q", tenant_id=tenant, type="noop", payload=b"",
               created_at_ms=created_ms, priority_class=klass)  # fmt: skip


def test_the_snapshot_shows_each_class_and_each_tenant(tmp_path: Path) -> None:
    config = EngineConfig(tenants=TenantPolicy(default_cap=3, weights={"acme": 2.0}))
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=lambda: NOW_S)
    engine.partitions.assign(TP, -1001)
    engine.fetch.offer(TP, 0, job(0, "acme", "critical", created_ms=990_000), b"x")
    engine.fetch.offer(TP, 1, job(1, "acme", "bulk", created_ms=999_000), b"x")
    engine.fetch.offer(TP, 2, job(2, "zed", "bulk", created_ms=995_000), b"x")
    engine.workers.claim("w", 1, wait_s=0)  # the critical job
    view = json.loads(json.dumps(plain(engine.views.fairness())))
    assert view["classes"] == [
        {"name": "critical", "weight": 6, "ready": 0, "oldest_ready_age_ms": None},
        {"name": "default", "weight": 3, "ready": 0, "oldest_ready_age_ms": None},
        {"name": "bulk", "weight": 1, "ready": 2, "oldest_ready_age_ms": 5_000},
    ]
    assert view["tenants"] == [
        {"tenant": "acme", "ready": 1, "in_flight": 1, "cap": 3, "weight": 2.0, "overflow": 0},
        {"tenant": "zed", "ready": 1, "in_flight": 0, "cap": 3, "weight": 1.0, "overflow": 0},
    ]
    lines = fairness_lines(view)
    assert "bulk (weight 1): ready 2, oldest 5.0s" in lines[0]
    assert lines[1] == "  tenant acme: ready 1, in flight 1, cap 3, weight 2, overflow 0"


def test_metrics_per_class_and_for_the_busiest_tenants_only() -> None:
    tenants = [{"tenant": f"t{i}", "ready": 1, "in_flight": 1, "cap": None, "weight": 1.0,
                "overflow": 2} for i in range(TOP_TENANTS + 5)]  # fmt: skip
    snap = {"ready": 0, "partitions": [], "counters": {}, "tenants": tenants,
            "classes": [{"name": "critical", "weight": 6, "ready": 4,
                         "oldest_ready_age_ms": 1500}]}  # fmt: skip
    registry = CollectorRegistry()
    registry.register(EngineCollector(lambda: snap, "emails"))
    text = generate_latest(registry).decode()
    assert 'leasekeeper_class_ready_jobs{class="critical",queue="emails"} 4.0' in text
    assert 'leasekeeper_class_oldest_ready_age_seconds{class="critical",queue="emails"} 1.5' in text
    series = [line for line in text.splitlines() if line.startswith("leasekeeper_tenant_ready")]
    assert len(series) == TOP_TENANTS + 1, "bounded: the busiest by name, the rest as other"
    assert 'leasekeeper_tenant_ready_jobs{queue="emails",tenant="other"} 5.0' in text
    overflow = [line for line in text.splitlines() if line.startswith("leasekeeper_tenant_overf")]
    assert len(overflow) == TOP_TENANTS + 1, "the overflow backlog is bounded the same way"
    assert 'leasekeeper_tenant_overflow_jobs{queue="emails",tenant="other"} 10.0' in text
