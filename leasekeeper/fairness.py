"""Which ready job is dispatched next: round-robin across tenants, FIFO within one.

Invariant 7: one tenant's backlog in a partition must not hold back another
tenant's job fetched behind it. Keeping the choice in its own object lets later
policies (per-tenant caps, weights) replace it without touching the engine.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class DispatchPolicy(Protocol[T]):
    def push(self, tenant: str, item: T) -> None: ...

    def pop(self) -> T | None: ...

    def remove_if(self, predicate: Callable[[T], bool]) -> list[T]: ...

    def __len__(self) -> int: ...


class TenantRoundRobin(Generic[T]):
    """Tenants with ready work take turns; each tenant's own jobs stay in fetch order."""

    def __init__(self) -> None:
        self._queues: OrderedDict[str, deque[T]] = OrderedDict()
        self._size = 0

    def push(self, tenant: str, item: T) -> None:
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
        queue.append(item)
        self._size += 1

    def push_front(self, tenant: str, item: T) -> None:
        """Put back a job that was released unrun, ahead of its tenant's others."""
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
            self._queues.move_to_end(tenant, last=False)
        queue.appendleft(item)
        self._size += 1

    def pop(self) -> T | None:
        if not self._queues:
            return None
        tenant, queue = next(iter(self._queues.items()))
        item = queue.popleft()
        self._size -= 1
        if queue:
            self._queues.move_to_end(tenant)
        else:
            del self._queues[tenant]
        return item

    def remove_if(self, predicate: Callable[[T], bool]) -> list[T]:
        """Drop the items matching ``predicate`` (a revoked partition's jobs)."""
        removed: list[T] = []
        for tenant in list(self._queues):
            kept: deque[T] = deque()
            for item in self._queues[tenant]:
                (removed if predicate(item) else kept).append(item)
            if kept:
                self._queues[tenant] = kept
            else:
                del self._queues[tenant]
        self._size -= len(removed)
        return removed

    def tenants(self) -> dict[str, int]:
        return {tenant: len(queue) for tenant, queue in self._queues.items()}

    def __iter__(self) -> Iterator[T]:
        for queue in self._queues.values():
            yield from queue

    def __len__(self) -> int:
        return self._size
