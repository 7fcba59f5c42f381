"""A breaker's state as others see it: the transitions a leasekeeper publishes on the
queue's breaker topic (and adopts from it), and the view ``inspect`` and the metrics
show."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from jobcore.plain import renamed, rounded

__all__ = ["BreakerState", "BreakerView", "Transition"]


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, kw_only=True)
class Transition:
    """A state change to publish: the state, when the next probe may go (monotonic
    seconds; 0 when closed), the cool-down that led to it and why."""

    job_type: str
    state: BreakerState
    until: float
    cooldown_s: float
    trips: int
    forced: bool
    reason: str


@dataclass(frozen=True, kw_only=True)
class BreakerView:
    """One breaker as ``inspect`` and the metrics show it."""

    job_type: str = field(metadata=renamed("type"))
    state: BreakerState
    rule: str
    failure_rate: float = field(metadata=rounded(3))
    calls: int
    failures: int
    next_probe_in_s: float | None
    cooldown_s: float
    trips: int
    forced: bool
    reason: str
    probes_out: int
    parked: int
