"""A breaker's state as others see it: the transitions a leasekeeper publishes on the
queue's breaker topic (and adopts from it), and the view ``inspect`` and the metrics
show."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

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

    job_type: str
    state: BreakerState
    rule: str
    failure_rate: float
    calls: int
    failures: int
    next_probe_in_s: float | None
    cooldown_s: float
    trips: int
    forced: bool
    reason: str
    probes_out: int
    parked: int

    def to_dict(self) -> dict[str, object]:
        return {
            "type": self.job_type,
            "state": self.state.value,
            "rule": self.rule,
            "failure_rate": round(self.failure_rate, 3),
            "calls": self.calls,
            "failures": self.failures,
            "next_probe_in_s": self.next_probe_in_s,
            "cooldown_s": self.cooldown_s,
            "trips": self.trips,
            "forced": self.forced,
            "reason": self.reason,
            "probes_out": self.probes_out,
            "parked": self.parked,
        }
