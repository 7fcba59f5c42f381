"""Which ready job is dispatched next: round-robin across tenants, FIFO within one.

One noisy tenant cannot starve others: one tenant's backlog in a partition must
not hold back another tenant's job fetched behind it. Keeping the choice in its own
object lets later policies (per-tenant caps, weights) replace it without touching the
engine: ``LeaseEngine(policy=...)`` takes any ``DispatchPolicy``.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Container, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class TenantRoundRobin(Generic[T]):
    """Tenants with ready work take turns; each tenant's own jobs stay in fetch order.

    With a ``kind`` (a job's type), it also counts items per kind, so a claimer
    that runs only some kinds learns in O(kinds) whether anything is for it, and
    ``pop(accept)`` skips items it cannot take without reordering the others.
    """

    def __init__(self, kind: Callable[[T], str] | None = None) -> None:
        self._queues: OrderedDict[str, deque[T]] = OrderedDict()
        self._size = 0
        self._kind = kind
        self._kinds: Counter[str] = Counter()

    def _count(self, item: T, delta: int) -> None:
        if self._kind is not None:
            kind = self._kind(item)
            self._kinds[kind] += delta
            if self._kinds[kind] <= 0:
                del self._kinds[kind]

    def has_any(self, kinds: frozenset[str] = frozenset()) -> bool:
        """Whether an item of one of ``kinds`` waits (any item when ``kinds`` is empty)."""
        if not kinds or self._kind is None:
            return self._size > 0
        return any(self._kinds.get(kind, 0) > 0 for kind in kinds)

    def push(self, tenant: str, item: T) -> None:
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
        queue.append(item)
        self._size += 1
        self._count(item, 1)

    def push_front(self, tenant: str, item: T) -> None:
        """Put back a job that was released unrun, ahead of its tenant's others."""
        queue = self._queues.get(tenant)
        if queue is None:
            queue = self._queues[tenant] = deque()
            self._queues.move_to_end(tenant, last=False)
        queue.appendleft(item)
        self._size += 1
        self._count(item, 1)

    def pop(
        self, accept: Callable[[T], bool] | None = None, skip: Container[str] = frozenset()
    ) -> T | None:
        """The next tenant's oldest item (that ``accept`` takes); tenants without one, or
        in ``skip``, keep their turn."""
        for tenant, queue in self._queues.items():
            if tenant in skip:
                continue
            index = _first(queue, accept)
            if index is None:
                continue
            item = queue[index]
            del queue[index]
            self._size -= 1
            self._count(item, -1)
            if queue:
                self._queues.move_to_end(tenant)
            else:
                del self._queues[tenant]
            return item
        return None

    def settled(self, tenant: str, cost_s: float) -> None:
        """Round robin counts jobs, not their cost."""

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
        for item in removed:
            self._count(item, -1)
        return removed

    def tenants(self) -> dict[str, int]:
        return {tenant: len(queue) for tenant, queue in self._queues.items()}

    def __iter__(self) -> Iterator[T]:
        for queue in self._queues.values():
            yield from queue

    def __len__(self) -> int:
        return self._size


def _first(queue: deque[T], accept: Callable[[T], bool] | None) -> int | None:
    if accept is None:
        return 0 if queue else None
    return next((i for i, item in enumerate(queue) if accept(item)), None)
