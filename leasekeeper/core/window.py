"""The ready window: fetched jobs waiting for a worker, and the ones waiting for their time.

It holds what the consumer loop fetched and the engine has not handed out yet:
the ready jobs in the dispatch policy (per tenant, per job type), their bytes,
and the delayed heap of jobs fetched less than one tier before their ``run_at``
(held here, not in a paused partition that would hold back the records behind
them). The window bounds what the loop fetches (``room``) in records and bytes.

It also counts its jobs per partition, so that a full window pauses only the
partitions holding more than their share of it (``over_share``): one partition's
backlog must not stop the fetch of the others (see docs/fairness.md).
The engine's lock guards it; ``wake`` tells waiting claimers that a job of a type arrived.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Container, Iterable, Iterator, Mapping

from leasekeeper.core.dispatch_policy import DispatchPolicy
from leasekeeper.core.leases import Pending, TopicPart


def window_slice(
    records: int, fetching: Iterable[TopicPart], unit: Callable[[TopicPart], object] | None
) -> int:
    """Each sharing unit's slice of a window of ``records`` (``ReadyWindow.over_share``)."""
    units = {tp if unit is None else unit(tp) for tp in fetching}
    return records // max(1, len(units))


def job_type(pending: Pending) -> str:
    return pending.job.type


def priority_class(pending: Pending) -> str:
    return pending.job.priority_class


def of_types(job_types: frozenset[str]) -> Callable[[Pending], bool] | None:
    """The claim's filter: None (any job) when ``job_types`` is empty."""
    if not job_types:
        return None
    return lambda pending: pending.job.type in job_types


class ReadyWindow:
    def __init__(
        self,
        *,
        records: int,
        max_bytes: int,
        wake: Callable[[str], None],
        policy: DispatchPolicy[Pending],
    ) -> None:
        """``policy`` orders the ready jobs: the engine's is weighted priority classes,
        then tenants by weighted fair queuing on cost (``fairness.weighted``)."""
        self.records = records
        self._max_bytes = max_bytes
        self._wake = wake
        self._ready = policy
        self.bytes = 0
        self._delayed: list[tuple[int, int, Pending]] = []
        self._seq = itertools.count()
        # Jobs held (ready or delayed) per partition: what ``over_share`` compares.
        # Plain dicts, not Counters: compiled, a dict subclass's item access goes
        # through its Python-level slots, several times for every job in and out.
        self._held: dict[TopicPart, int] = {}
        # The same per tenant: what the overflow lane compares (a flooding tenant).
        self._tenants_held: dict[TopicPart, dict[str, int]] = {}
        # Partitions ``over_share`` found over their share, until half of it is free.
        self._over: set[TopicPart] = set()
        # Ready jobs per job type: what a rate limit's share of the window compares.
        self._types: dict[str, int] = {}

    def _typed(self, pending: Pending, delta: int) -> None:
        job_type = pending.job.type
        count = self._types.get(job_type, 0) + delta
        if count > 0:
            self._types[job_type] = count
        else:
            self._types.pop(job_type, None)

    def ready_types(self) -> Iterable[str]:
        """The job types with ready jobs in the window (kept as they come and go)."""
        return self._types.keys()

    def ready_of_type(self, job_type: str) -> int:
        """Ready jobs of ``job_type`` in the window (kept as they come and go)."""
        return self._types.get(job_type, 0)

    def _hold(self, pending: Pending, delta: int) -> None:
        tp, tenant = pending.tp, pending.job.tenant_id
        count = self._held.get(tp, 0) + delta
        if count > 0:
            self._held[tp] = count
        else:
            self._held.pop(tp, None)
        tenants = self._tenants_held.get(tp)
        if tenants is None:
            tenants = self._tenants_held[tp] = {}
        count = tenants.get(tenant, 0) + delta
        if count > 0:
            tenants[tenant] = count
        else:
            tenants.pop(tenant, None)
            if not tenants:
                del self._tenants_held[tp]

    def queue(self, pending: Pending, not_before_ms: int, now_ms: int) -> None:
        """Into the ready jobs, or the delayed heap when it is not due yet."""
        if not_before_ms > now_ms:
            heapq.heappush(self._delayed, (not_before_ms, next(self._seq), pending))
            self._hold(pending, 1)
        else:
            self.push(pending)

    def push(self, pending: Pending) -> None:
        self._ready.push(pending.job.tenant_id, pending)
        self.bytes += len(pending.envelope)
        self._hold(pending, 1)
        self._typed(pending, 1)
        self._wake(pending.job.type)  # a waiting claimer of its type

    def push_front(self, pending: Pending) -> None:
        """A released job: it was not run, so it goes back to the front of its tenant."""
        self._ready.push_front(pending.job.tenant_id, pending)
        self.bytes += len(pending.envelope)
        self._hold(pending, 1)
        self._typed(pending, 1)
        self._wake(pending.job.type)

    def pop(
        self, accept: Callable[[Pending], bool] | None, skip: Container[str] = frozenset()
    ) -> Pending | None:
        """The job the policy chooses, from a tenant not in ``skip`` (at its cap)."""
        pending = self._ready.pop(accept, skip)
        if pending is not None:
            self.bytes -= len(pending.envelope)
            self._hold(pending, -1)
            self._typed(pending, -1)
        return pending

    def settled(self, tenant: str, cost_s: float) -> None:
        """A job of ``tenant`` ran ``cost_s`` of handler time: the policy charges it."""
        self._ready.settled(tenant, cost_s)

    def classes(self) -> dict[str, int]:
        """Ready jobs per priority class, when the policy knows classes."""
        classes = getattr(self._ready, "classes", None)
        return dict(classes()) if callable(classes) else {}

    def has_any(self, job_types: frozenset[str]) -> bool:
        return self._ready.has_any(job_types)

    def remove_ready(self, predicate: Callable[[Pending], bool]) -> list[Pending]:
        removed = self._ready.remove_if(predicate)
        self.bytes -= sum(len(p.envelope) for p in removed)
        for pending in removed:
            self._hold(pending, -1)
            self._typed(pending, -1)
        return removed

    def drop(self, predicate: Callable[[Pending], bool]) -> None:
        """Forget ready and delayed jobs alike (their partition is moving away)."""
        self.remove_ready(predicate)
        kept = [item for item in self._delayed if not predicate(item[2])]
        if len(kept) != len(self._delayed):
            for item in self._delayed:
                if predicate(item[2]):
                    self._hold(item[2], -1)
            self._delayed = kept
            heapq.heapify(self._delayed)

    def promote_due(self, now_ms: int, live: Callable[[Pending], bool]) -> int:
        """Move delayed jobs whose time came (and whose partition is still ``live``) to
        the ready jobs; returns how many."""
        moved = 0
        while self._delayed and self._delayed[0][0] <= now_ms:
            _, _, pending = heapq.heappop(self._delayed)
            if not live(pending):
                self._hold(pending, -1)
                continue
            self._ready.push(pending.job.tenant_id, pending)
            self.bytes += len(pending.envelope)
            self._typed(pending, 1)
            self._wake(pending.job.type)
            moved += 1
        return moved

    def room(self) -> int:
        """How many more records the window takes (0 when full by records or bytes)."""
        if self.bytes >= self._max_bytes:
            return 0
        return max(0, self.records - len(self._ready) - len(self._delayed))

    def held(self, tp: TopicPart) -> int:
        """Jobs of ``tp`` in the window, ready or delayed."""
        return self._held.get(tp, 0)

    def held_by_tenant(self, tp: TopicPart) -> Mapping[str, int]:
        """Jobs of ``tp`` in the window per tenant, ready or delayed."""
        return self._tenants_held.get(tp, {})

    def over_share(
        self, fetching: Iterable[TopicPart], unit: Callable[[TopicPart], object] | None = None
    ) -> tuple[set[TopicPart], int]:
        """Which of the ``fetching`` partitions hold their share of a full window or
        more, and how many records one fetch may take from the others.

        The share is the window's records split evenly among the sharing units: each
        partition is a unit of its own, unless ``unit`` maps several to one (the
        delay tiers of one class and partition number share one share, so that a
        class's several tiers do not shrink every other partition's share). A unit
        under its share keeps fetching up to it, however full the window is with
        another unit's jobs. One fetch may take all its records from one unit, so it
        takes no more than the smallest headroom: no unit passes its share, and the
        window holds at most twice its records. Memory stays bounded.
        """
        members: dict[object, list[TopicPart]] = {}
        for tp in set(fetching):
            members.setdefault(tp if unit is None else unit(tp), []).append(tp)
        share = max(1, self.records // max(1, len(members)))
        held = {key: sum(self._held.get(tp, 0) for tp in tps) for key, tps in members.items()}
        # Hysteresis per unit: one paused at its share stays paused until half of it
        # is free. Resumed at share - 1, a flooded partition would fetch one record,
        # pause again, and repeat for every job a worker took (a fifth of the
        # leasekeeper's time in a drain profile), and its headroom of one record
        # would cap every other partition's fetch as well.
        paused = {key for key, tps in members.items() if not self._over.isdisjoint(tps)}
        over_units = {
            key for key, n in held.items() if n >= share or (key in paused and n > share // 2)
        }
        over = {tp for key in over_units for tp in members[key]}
        self._over = over
        headroom = min((share - n for key, n in held.items() if key not in over_units), default=0)
        return over, headroom

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
