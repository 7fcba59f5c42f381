"""What a leasekeeper shows of itself, as typed values.

``inspect`` (over the RPC), metrics and the ``make run`` demo all read one
snapshot. It is built from frozen dataclasses and turned into JSON-ready dicts
only at the edge (``to_dict``: the RPC's answer, the metrics collector), so a
field cannot be missing in one reader and present in another.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from leasekeeper.core.engine_config import Counters
from leasekeeper.core.retry_budget import BudgetSnapshot
from leasekeeper.core.unhandled_warning import UnhandledWait
from leasekeeper.ordering.values import BlockedLine

if TYPE_CHECKING:  # the engine imports this module; these import the engine
    from leasekeeper.breaker.states import BreakerView
    from leasekeeper.fairness.view import FairnessSnapshot
    from leasekeeper.kafka.control_feed import ControlSnapshot
    from leasekeeper.kafka.copy_sender import OutboxView
    from leasekeeper.limits.admission import LimitsSnapshot


@dataclass(frozen=True, kw_only=True)
class DeadLetterView:
    """For snapshots and metrics: the figures and when they were taken (epoch ms)."""

    depth: int
    newest_ms: int | None
    checked_ms: int

    def to_dict(self) -> dict[str, object]:
        return {"depth": self.depth, "newest_ms": self.newest_ms, "checked_ms": self.checked_ms}


@dataclass(frozen=True, kw_only=True)
class LeaseView:
    lease_id: str
    job_id: str
    type: str
    tenant: str
    worker: str
    attempt: int
    age_s: float
    expires_in_s: float
    # False while the job waits in its worker's prefetch (its handler not started).
    started: bool = True
    # How far the job has got, as its worker last said (``jobcore.progress``); None
    # when it said nothing, and then left out of the dict.
    progress: float | None = None
    progress_message: str | None = None

    def to_dict(self) -> dict[str, object]:
        view = asdict(self)
        for key in ("progress", "progress_message"):
            if view[key] is None:
                del view[key]
        return view


@dataclass(frozen=True, kw_only=True)
class PartitionView:
    topic: str
    partition: int
    committed: int
    highest_fetched: int
    committable: int
    unresolved: list[int]
    unresolved_count: int
    leases: tuple[LeaseView, ...]
    # Finished jobs no commit Kafka accepted describes yet (a move would re-run them).
    uncommitted: int = 0

    def to_dict(self) -> dict[str, object]:
        view = asdict(self)
        view["leases"] = [lease.to_dict() for lease in self.leases]
        return view


@dataclass(frozen=True, kw_only=True)
class EngineSnapshot:
    """The lease engine's state: window, partitions, leases, counters."""

    retry_budget: BudgetSnapshot
    partitions: tuple[PartitionView, ...]
    ready: int
    delayed: int
    next_delayed_due_ms: int | None
    ready_bytes: int
    ready_by_tenant: dict[str, int]
    in_flight_by_tenant: dict[str, int]
    counters: Counters
    settling_in: bool
    workers: dict[str, list[str]]
    # Ready jobs of a type no connected worker runs, waiting for the DLQ (unhandled).
    unhandled: tuple[UnhandledWait, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "retry_budget": self.retry_budget.to_dict(),
            "partitions": [p.to_dict() for p in self.partitions],
            "ready": self.ready,
            "delayed": self.delayed,
            "next_delayed_due_ms": self.next_delayed_due_ms,
            "ready_bytes": self.ready_bytes,
            "ready_by_tenant": dict(self.ready_by_tenant),
            "in_flight_by_tenant": dict(self.in_flight_by_tenant),
            "counters": asdict(self.counters),
            "settling_in": self.settling_in,
            "workers": dict(self.workers),
            "unhandled": [w.to_dict() for w in self.unhandled],
        }


@dataclass(frozen=True, kw_only=True)
class LeaseKeeperSnapshot:
    """The whole leasekeeper: the engine plus the service around it."""

    engine: EngineSnapshot
    queue: str
    topics: dict[str, str]
    member: str
    uptime_s: float
    commits: int
    held_tiers: dict[str, int]
    outbox: OutboxView
    kafka: str
    # The last error Kafka reported (None while none did): why "connecting" lasts.
    kafka_last_error: str | None = None
    # Counted by the RPC layer, shown among the engine's counters.
    invalid_retry_after: int = 0
    control: ControlSnapshot | None = None
    # Per priority class and per tenant (see fairness_view).
    fairness: FairnessSnapshot | None = None
    # Rate limiters (see limit_dispatch); None when no limit is set.
    limits: LimitsSnapshot | None = None
    # The queue's DLQ as Kafka counts it (see dlq_watch); None until known.
    dead_letters: DeadLetterView | None = None
    # Circuit breakers per job type (see docs/breaker.md).
    breakers: tuple[BreakerView, ...] = ()
    # Ordering keys whose head is out of its partition (see docs/ordering.md).
    blocked_keys: tuple[BlockedLine, ...] = ()
    # Times an overflow record diverted by its producer waited at its switch.
    switch_holds: int = 0

    def to_dict(self) -> dict[str, object]:
        view = self.engine.to_dict()
        counters = asdict(self.engine.counters)
        counters["invalid_retry_after"] = self.invalid_retry_after
        view.update(
            counters=counters,
            queue=self.queue,
            topics=dict(self.topics),
            member=self.member,
            uptime_s=self.uptime_s,
            commits=self.commits,
            held_tiers=dict(self.held_tiers),
            switch_holds=self.switch_holds,
            outbox=self.outbox.to_dict(),
            kafka=self.kafka,
            kafka_last_error=self.kafka_last_error,
        )
        if self.control is not None:
            view["control"] = self.control.to_dict()
        if self.fairness is not None:
            view.update(self.fairness.to_dict())
        if self.limits is not None:
            view["limits"] = self.limits.to_dict()
        if self.dead_letters is not None:
            view["dead_letters"] = self.dead_letters.to_dict()
        view["breakers"] = [b.to_dict() for b in self.breakers]
        view["blocked_keys"] = [b.to_dict() for b in self.blocked_keys]
        return view
