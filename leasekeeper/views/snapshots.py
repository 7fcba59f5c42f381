"""What a leasekeeper shows of itself, as typed values.

``inspect`` (over the RPC), metrics and the ``make run`` demo all read one
snapshot. It is built from frozen dataclasses and turned into JSON-ready dicts
only at the edge (``jobcore.plain``: the RPC's answer, the metrics collector), so a
field cannot be missing in one reader and present in another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from jobcore.plain import FLATTEN, OMIT_NONE, plain_dict
from leasekeeper.core.context import Counters
from leasekeeper.core.copies import CopyKind
from leasekeeper.core.retry_budget import BudgetSnapshot
from leasekeeper.core.unhandled_warning import UnhandledWait
from leasekeeper.deferral.port import DeferralView
from leasekeeper.ordering.values import BlockedLine

if TYPE_CHECKING:  # only types here: the features' views, read by ``plain``
    from leasekeeper.breaker.states import BreakerView
    from leasekeeper.fairness.view import FairnessSnapshot
    from leasekeeper.limits.admission import LimitsSnapshot


@dataclass(frozen=True, kw_only=True)
class BlockedCopy:
    topic: str
    partition: int
    offset: int
    kind: CopyKind
    reason: str


@dataclass(frozen=True, kw_only=True)
class OutboxView:
    """What the outbox holds, for snapshots and metrics (any thread may read it)."""

    pending: int = 0
    in_flight: int = 0
    blocked: tuple[BlockedCopy, ...] = ()
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ControlSnapshot:
    """How big the control state is and how long the start-up read took."""

    cancellations: int
    dedupe_claims: int
    pruned: int
    catch_up_s: float | None
    catch_up_records: int


@dataclass(frozen=True, kw_only=True)
class DeadLetterView:
    """For snapshots and metrics: the figures and when they were taken (epoch ms)."""

    depth: int
    newest_ms: int | None
    checked_ms: int


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
    progress: float | None = field(default=None, metadata=OMIT_NONE)
    progress_message: str | None = field(default=None, metadata=OMIT_NONE)


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


@dataclass(frozen=True, kw_only=True)
class LeaseKeeperSnapshot:
    """The whole leasekeeper: the engine plus the service around it."""

    engine: EngineSnapshot = field(metadata=FLATTEN)
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
    control: ControlSnapshot | None = field(default=None, metadata=OMIT_NONE)
    # Per priority class and per tenant (see fairness_view).
    fairness: FairnessSnapshot | None = field(default=None, metadata={**FLATTEN, **OMIT_NONE})
    # Rate limiters (see limit_dispatch); None when no limit is set.
    limits: LimitsSnapshot | None = field(default=None, metadata=OMIT_NONE)
    # The floods read past now (see leasekeeper/deferral).
    floods: tuple[DeferralView, ...] = ()
    # The queue's DLQ as Kafka counts it (see dlq_watch); None until known.
    dead_letters: DeadLetterView | None = field(default=None, metadata=OMIT_NONE)
    # Circuit breakers per job type (see docs/breaker.md).
    breakers: tuple[BreakerView, ...] = ()
    # Ordering keys whose head is out of its partition (see docs/ordering.md).
    blocked_keys: tuple[BlockedLine, ...] = ()
    # Times an overflow record diverted by its producer waited at its switch.
    switch_holds: int = 0

    def to_dict(self) -> dict[str, object]:
        """The engine's fields and the service's in one object, as ``inspect`` reads it;
        the RPC layer's counter among the engine's counters."""
        view = plain_dict(self)
        view["counters"]["invalid_retry_after"] = view.pop("invalid_retry_after")
        return view
