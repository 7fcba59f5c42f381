"""Weighted dispatch: priority classes by weight, tenants by weighted fair queuing on cost.

The round robin of ``fairness.py`` gives every tenant one job per turn. That is fair
in job counts, not in worker time: a tenant whose jobs run 100 ms takes ten times the
workers of one whose jobs run 10 ms. Here each tenant has a virtual clock advanced by
the cost of the jobs it was served divided by its weight (cost is the handler's own
run time, reported in each settlement), and the tenant whose clock is lowest goes
next: weighted fair queuing. Until a settlement reports the real cost, a job is
charged the tenant's running mean, then corrected.

Priority classes (``critical``, ``default``, ``bulk`` by default) are separate queues
served by smooth weighted round robin, 6:3:1 by default: a class with nothing ready
gives its turns away, and a low class still gets its share (no strict priority,
which would starve it). A per-tenant cap skips a tenant already running that many
jobs; the caller passes the tenants to skip, counted over every worker of the
leasekeeper.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from leasekeeper.core.leases import Pending
from leasekeeper.core.recent import RECENT_LIMIT, RecentKeys
from leasekeeper.core.window import job_type, priority_class

T = TypeVar("T")

DEFAULT_CLASS = "default"
DEFAULT_CLASS_WEIGHTS: Mapping[str, int] = {"critical": 6, DEFAULT_CLASS: 3, "bulk": 1}
# What a job is charged before its tenant's first settlement reports a real cost.
FIRST_COST_S = 0.01
# How much one settlement moves a tenant's mean cost.
COST_SMOOTHING = 0.2


@dataclass(frozen=True, kw_only=True)
class TenantPolicy:
    """Weights and caps per tenant; tenants not named get the defaults."""

    weights: Mapping[str, float] = field(default_factory=dict)
    default_weight: float = 1.0
    caps: Mapping[str, int] = field(default_factory=dict)
    default_cap: int | None = None

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, self.default_weight)

    def cap(self, tenant: str) -> int | None:
        return self.caps.get(tenant, self.default_cap)

    def at_cap(self, tenant: str, running: int) -> bool:
        """Whether ``tenant`` runs as many jobs as its cap allows (never, uncapped)."""
        cap = self.caps.get(tenant, self.default_cap)
        return cap is not None and running >= cap

    @property
    def capped(self) -> bool:
        """Whether any tenant has a cap (otherwise running jobs are not even counted)."""
        return self.default_cap is not None or bool(self.caps)


class _Tenants(Generic[T]):
    """One class's ready jobs per tenant, FIFO within a tenant, and a heap of the
    tenants by virtual clock (stale entries, whose clock moved since, are skipped), so
    choosing a tenant costs O(log tenants), not a scan of every tenant."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[T]] = {}
        self.size = 0
        self.heap: list[tuple[float, int, str]] = []


class WeightedFair(Generic[T]):
    """A ``DispatchPolicy``: weighted classes, then the tenant with the lowest virtual clock."""

    def __init__(
        self,
        *,
        klass: Callable[[T], str],
        kind: Callable[[T], str] | None = None,
        class_weights: Mapping[str, int] = DEFAULT_CLASS_WEIGHTS,
        tenants: TenantPolicy | None = None,
        recent: int = RECENT_LIMIT,
    ) -> None:
        self._klass = klass
        self._kind = kind
        self._weights = dict(class_weights)
        self._tenants = tenants or TenantPolicy()
        self._classes: dict[str, _Tenants[T]] = {name: _Tenants() for name in self._weights}
        # Plain dicts, not Counters: compiled, a dict subclass's item access goes
        # through its Python-level slots, once or twice for every job dispatched.
        self._credit: dict[str, int] = {}
        self._vtime: dict[str, float] = {}
        self._vnow = 0.0
        self._mean_cost: dict[str, float] = {}
        # A tenant's clock and mean cost outlive its queue only while it is among the
        # most recently idle: tenant ids are unbounded.
        self._idle: RecentKeys[str] = RecentKeys(recent)
        self._kinds: dict[str, int] = {}
        self._size = 0
        self._seq = itertools.count()

    # -- filling ------------------------------------------------------------------

    def _class_of(self, item: T) -> _Tenants[T]:
        name = self._klass(item)
        return self._classes.get(name) or self._classes.setdefault(DEFAULT_CLASS, _Tenants())

    def _queue(self, tenant: str, item: T) -> deque[T]:
        tenants = self._class_of(item)
        queue = tenants.queues.get(tenant)
        if queue is None:
            queue = tenants.queues[tenant] = deque()
            self._idle.active(tenant)
            # A tenant coming back starts at the present, not with credit saved while idle.
            self._vtime[tenant] = max(self._vtime.get(tenant, 0.0), self._vnow)
            self._enter(tenants, tenant)
        tenants.size += 1
        self._size += 1
        if self._kind is not None:
            kind = self._kind(item)
            self._kinds[kind] = self._kinds.get(kind, 0) + 1
        return queue

    def push(self, tenant: str, item: T) -> None:
        self._queue(tenant, item).append(item)

    def push_front(self, tenant: str, item: T) -> None:
        """A released job, not run: back at the front of its tenant."""
        self._queue(tenant, item).appendleft(item)

    # -- choosing -----------------------------------------------------------------

    def pop(
        self, accept: Callable[[T], bool] | None = None, skip: Container[str] = frozenset()
    ) -> T | None:
        """The next job: a class by weight among those with an eligible job, then the
        eligible tenant of that class with the lowest virtual clock. ``skip`` names the
        tenants at their cap."""
        chosen = self._choose(accept, skip)
        if chosen is None:
            return None
        name, tenant, index = chosen
        return self._take(name, tenant, index)

    def _choose(
        self, accept: Callable[[T], bool] | None, skip: Container[str]
    ) -> tuple[str, str, int] | None:
        candidates: dict[str, tuple[str, int]] = {}
        for name, tenants in self._classes.items():
            found = self._best_tenant(tenants, accept, skip) if tenants.size else None
            if found is not None:
                candidates[name] = found
        if not candidates:
            return None
        if len(candidates) == 1:  # its credit would gain its weight and lose it again
            for name, found in candidates.items():
                return (name, *found)
        # Smooth weighted round robin over the classes that can serve now: the others
        # give their turns away.
        credit = self._credit
        total = 0
        best = ""
        for name in candidates:
            weight = self._weights.get(name, 1)
            credit[name] = credit.get(name, 0) + weight
            total += weight
            if not best or credit[name] > credit[best]:
                best = name
        credit[best] -= total
        return (best, *candidates[best])

    def _enter(self, tenants: _Tenants[T], tenant: str) -> None:
        heapq.heappush(tenants.heap, (self._vtime[tenant], next(self._seq), tenant))
        if len(tenants.heap) > 4 * len(tenants.queues) + 64:  # drop the stale entries
            tenants.heap = [e for e in tenants.heap if self._current(tenants, e)]
            heapq.heapify(tenants.heap)

    def _current(self, tenants: _Tenants[T], entry: tuple[float, int, str]) -> bool:
        return entry[2] in tenants.queues and self._vtime.get(entry[2]) == entry[0]

    def _set_vtime(self, tenant: str, vtime: float) -> None:
        """Move a tenant's clock; its heap entries in every class follow."""
        self._vtime[tenant] = vtime
        for tenants in self._classes.values():
            if tenant in tenants.queues:
                self._enter(tenants, tenant)

    def _best_tenant(
        self, tenants: _Tenants[T], accept: Callable[[T], bool] | None, skip: Container[str]
    ) -> tuple[str, int] | None:
        """The eligible tenant with the lowest clock, and the index of its first job
        ``accept`` takes; the heap is left as it was (less stale entries)."""
        passed: list[tuple[float, int, str]] = []
        found: tuple[str, int] | None = None
        while tenants.heap and found is None:
            entry = heapq.heappop(tenants.heap)
            if not self._current(tenants, entry):
                continue
            passed.append(entry)
            tenant = entry[2]
            index = None if tenant in skip else _first(tenants.queues[tenant], accept)
            if index is not None:
                found = (tenant, index)
        for entry in passed:
            heapq.heappush(tenants.heap, entry)
        return found

    def _take(self, name: str, tenant: str, index: int) -> T:
        tenants = self._classes[name]
        queue = tenants.queues[tenant]
        item = queue[index]
        del queue[index]
        emptied = not queue
        if emptied:
            del tenants.queues[tenant]
        tenants.size -= 1
        self._size -= 1
        if self._kind is not None:
            kind = self._kind(item)
            left = self._kinds.get(kind, 0) - 1
            if left > 0:
                self._kinds[kind] = left
            else:
                self._kinds.pop(kind, None)
        self._vnow = self._vtime.get(tenant, 0.0)
        self._set_vtime(tenant, self._vnow + self._estimate(tenant) / self._tenants.weight(tenant))
        if emptied:
            self._went_idle(tenant)
        return item

    def _went_idle(self, tenant: str) -> None:
        """Keep an idle tenant's clock and mean cost while it is recent; forget those
        of the tenant idle longest past the limit (it comes back as a new tenant does,
        at the present clock)."""
        for tenants in self._classes.values():
            if tenant in tenants.queues:
                return
        for gone in self._idle.idle(tenant):
            self._vtime.pop(gone, None)
            self._mean_cost.pop(gone, None)

    # -- costs --------------------------------------------------------------------

    def _estimate(self, tenant: str) -> float:
        return self._mean_cost.get(tenant, FIRST_COST_S)

    def settled(self, tenant: str, cost_s: float) -> None:
        """A job of ``tenant`` ran for ``cost_s`` of handler time: charge the difference
        from what its dispatch was charged, and learn the tenant's mean cost."""
        if cost_s <= 0:
            return
        known = tenant in self._vtime
        estimate = self._estimate(tenant)
        weight = self._tenants.weight(tenant)
        self._set_vtime(tenant, self._vtime.get(tenant, self._vnow) + (cost_s - estimate) / weight)
        self._mean_cost[tenant] = estimate + COST_SMOOTHING * (cost_s - estimate)
        if not known:  # settled after it was forgotten, or never queued here
            self._went_idle(tenant)

    # -- the rest of the DispatchPolicy ---------------------------------------------

    def has_any(self, kinds: frozenset[str] = frozenset()) -> bool:
        if not kinds or self._kind is None:
            return self._size > 0
        return any(self._kinds.get(kind, 0) > 0 for kind in kinds)

    def remove_if(self, predicate: Callable[[T], bool]) -> list[T]:
        removed: list[T] = []
        for name, tenants in self._classes.items():
            for tenant in list(tenants.queues):
                for index in reversed(range(len(tenants.queues[tenant]))):
                    if tenant in tenants.queues and predicate(tenants.queues[tenant][index]):
                        removed.append(self._take_quietly(name, tenant, index))
        return removed

    def _take_quietly(self, name: str, tenant: str, index: int) -> T:
        """Remove without charging the tenant (the job leaves unrun)."""
        vtime, vnow = self._vtime.get(tenant, 0.0), self._vnow
        item = self._take(name, tenant, index)
        self._vnow = vnow
        self._set_vtime(tenant, vtime)
        return item

    def tenants(self) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for tenants in self._classes.values():
            for tenant, queue in tenants.queues.items():
                counts[tenant] += len(queue)
        return dict(counts)

    def classes(self) -> dict[str, int]:
        """Ready jobs per class (every configured class, zero included)."""
        return {name: tenants.size for name, tenants in self._classes.items()}

    def __iter__(self) -> Iterator[T]:
        for tenants in self._classes.values():
            for queue in tenants.queues.values():
                yield from queue

    def __len__(self) -> int:
        return self._size


def _first(queue: deque[T], accept: Callable[[T], bool] | None) -> int | None:
    if accept is None:
        return 0 if queue else None
    return next((i for i, item in enumerate(queue) if accept(item)), None)


def ready_policy(
    class_weights: Mapping[str, int] | None = None, tenants: TenantPolicy | None = None
) -> WeightedFair[Pending]:
    """The ready window's order unless the engine is given another: weighted priority
    classes, then tenants by weighted fair queuing on handler time; a job's kind is its
    type, so a claim for some types finds its jobs without reordering the others."""
    return WeightedFair(klass=priority_class, kind=job_type, tenants=tenants,
                        class_weights=class_weights or DEFAULT_CLASS_WEIGHTS)  # fmt: skip
