"""The ready window: fetched jobs waiting for a worker, and the ones waiting for their time.

It holds what the consumer loop fetched and the engine has not handed out yet:
the ready jobs in the dispatch policy (per tenant, per job type), their bytes,
and the delayed heap of jobs fetched less than one tier before their ``run_at``
(held here, not in a paused partition that would hold back the records behind
them). The window bounds what the loop fetches (``room``) in records and bytes.
The engine's lock guards it; ``wake`` tells waiting claimers that work arrived.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from leasekeeper.fairness import DispatchPolicy, TenantRoundRobin
from leasekeeper.leases import Pending


def job_type(pending: Pending) -> str:
    return pending.job.type


class ReadyWindow:
    def __init__(
        self,
        *,
        records: int,
        max_bytes: int,
        wake: Callable[[], None],
        policy: DispatchPolicy[Pending] | None = None,
    ) -> None:
        self.records = records
        self._max_bytes = max_bytes
        self._wake = wake
        self._ready: DispatchPolicy[Pending] = (
            policy if policy is not None else TenantRoundRobin(kind=job_type)
        )
        self.bytes = 0
        self._delayed: list[tuple[int, int, Pending]] = []
        self._seq = itertools.count()

    def queue(self, pending: Pending, not_before_ms: int, now_ms: int) -> None:
        """Into the ready jobs, or the delayed heap when it is not due yet."""
        if not_before_ms > now_ms:
            heapq.heappush(self._delayed, (not_before_ms, next(self._seq), pending))
        else:
            self.push(pending)

    def push(self, pending: Pending) -> None:
        self._ready.push(pending.job.tenant_id, pending)
        self.bytes += len(pending.envelope)
        # Every claimer wakes: the one woken alone might not run this job's type.
        self._wake()

    def push_front(self, pending: Pending) -> None:
        """A released job: it was not run, so it goes back to the front of its tenant."""
        self._ready.push_front(pending.job.tenant_id, pending)
        self.bytes += len(pending.envelope)
        self._wake()

    def pop(self, accept: Callable[[Pending], bool] | None) -> Pending | None:
        pending = self._ready.pop(accept)
        if pending is not None:
            self.bytes -= len(pending.envelope)
        return pending

    def has_any(self, job_types: frozenset[str]) -> bool:
        return self._ready.has_any(job_types)

    def remove_ready(self, predicate: Callable[[Pending], bool]) -> list[Pending]:
        removed = self._ready.remove_if(predicate)
        self.bytes -= sum(len(p.envelope) for p in removed)
        return removed

    def drop(self, predicate: Callable[[Pending], bool]) -> None:
        """Forget ready and delayed jobs alike (their partition is moving away)."""
        self.remove_ready(predicate)
        self._delayed = [item for item in self._delayed if not predicate(item[2])]
        heapq.heapify(self._delayed)

    def promote_due(self, now_ms: int, live: Callable[[Pending], bool]) -> int:
        """Move delayed jobs whose time came (and whose partition is still ``live``) to
        the ready jobs; returns how many."""
        moved = 0
        while self._delayed and self._delayed[0][0] <= now_ms:
            _, _, pending = heapq.heappop(self._delayed)
            if not live(pending):
                continue
            self._ready.push(pending.job.tenant_id, pending)
            self.bytes += len(pending.envelope)
            moved += 1
        if moved:
            self._wake()
        return moved

    def room(self) -> int:
        """How many more records the window takes (0 when full by records or bytes)."""
        if self.bytes >= self._max_bytes:
            return 0
        return max(0, self.records - len(self._ready) - len(self._delayed))

    def ready(self) -> Iterator[Pending]:
        return iter(self._ready)

    def delayed(self) -> Iterator[tuple[int, Pending]]:
        """(due ms, job) in heap order, not sorted."""
        return ((due, pending) for due, _, pending in self._delayed)

    @property
    def ready_count(self) -> int:
        return len(self._ready)

    @property
    def delayed_count(self) -> int:
        return len(self._delayed)

    @property
    def next_due_ms(self) -> int | None:
        return self._delayed[0][0] if self._delayed else None

    def ready_by_tenant(self) -> dict[str, int]:
        return self._ready.tenants()
