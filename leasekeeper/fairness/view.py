"""Fairness seen from outside: per priority class and per tenant, for inspect and metrics.

Per class: the ready jobs in the window, their weight, and the age of the oldest
(since it was due: enqueued, or its run_at), the first sign of a class waiting too long.
Per tenant: ready, in flight, cap and weight, the numbers that explain why a tenant
is or is not served. Built under the engine's lock from the window and the book.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.window import ReadyWindow
from leasekeeper.fairness.weighted import TenantPolicy


@dataclass(frozen=True, kw_only=True)
class ClassView:
    name: str
    weight: int
    ready: int
    oldest_ready_age_ms: int | None


@dataclass(frozen=True, kw_only=True)
class TenantView:
    tenant: str
    ready: int
    in_flight: int
    cap: int | None
    weight: float
    # Jobs moved to the overflow lane from this leasekeeper's partitions and not run
    # yet (see overflow_lane.OverflowLane.backlog).
    overflow: int = 0


@dataclass(frozen=True, kw_only=True)
class FairnessSnapshot:
    classes: tuple[ClassView, ...]
    tenants: tuple[TenantView, ...]


def fairness_snapshot(
    *,
    class_weights: Mapping[str, int],
    tenants: TenantPolicy,
    window: ReadyWindow,
    book: PartitionBook,
    now_ms: int,
    overflow: Mapping[str, int] | None = None,
) -> FairnessSnapshot:
    """Tenants are sorted by ready plus in flight, busiest first."""
    ready: Counter[str] = Counter()
    oldest: dict[str, int] = {}
    for pending in window.ready():
        name = pending.job.priority_class
        name = name if name in class_weights else "default"
        ready[name] += 1
        # Ready since it was due: a delayed, retried or parked job is not late for
        # the time it was meant to wait (the age must not raise the class's alert).
        due = max(pending.job.created_at_ms, pending.job.run_at_ms)
        oldest[name] = min(oldest.get(name, due), due)
    classes = tuple(
        ClassView(name=name, weight=weight, ready=ready[name],
                  oldest_ready_age_ms=None if name not in oldest else max(0, now_ms - oldest[name]))
        for name, weight in class_weights.items()
    )  # fmt: skip
    return FairnessSnapshot(
        classes=classes, tenants=_tenants(tenants, window, book, overflow or {})
    )


def _tenants(
    policy: TenantPolicy, window: ReadyWindow, book: PartitionBook, overflow: Mapping[str, int]
) -> tuple[TenantView, ...]:
    waiting = window.ready_by_tenant()
    running: Counter[str] = Counter()
    for state in book.parts.values():
        running.update(lease.pending.job.tenant_id for lease in state.leases.values())
    moved = {t for t, n in overflow.items() if n}

    def busy(tenant: str) -> int:
        return waiting.get(tenant, 0) + running[tenant] + overflow.get(tenant, 0)

    names = sorted(set(waiting) | set(running) | moved, key=lambda t: -busy(t))
    return tuple(
        TenantView(tenant=t, ready=waiting.get(t, 0), in_flight=running[t],
                   cap=policy.cap(t), weight=policy.weight(t), overflow=overflow.get(t, 0))
        for t in names
    )  # fmt: skip
