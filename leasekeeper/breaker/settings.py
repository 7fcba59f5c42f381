"""What an operator sets for the circuit breakers: a rule per job type (failure rate,
minimum calls, window) and the settings they share (cool-down, probes), parsed from
``leasekeeper serve --breaker`` and its companions (``docs/breaker.md``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from jobcore.durations import parse_duration

__all__ = ["DEFAULT_RULE", "BreakerRule", "BreakerSettings"]

_RATE = re.compile(r"^[0-9]+(?:\.[0-9]+)?%$")


@dataclass(frozen=True, kw_only=True)
class BreakerRule:
    """When a breaker opens: a failure share ``rate`` (0 < rate <= 1) of at least
    ``min_calls`` calls that ended within the last ``window_s`` seconds."""

    rate: float = 0.5
    min_calls: int = 20
    window_s: float = 30.0

    def __post_init__(self) -> None:
        if not (0 < self.rate <= 1):
            raise ValueError(f"breaker rate must be above 0% and at most 100%, got {self.rate:.0%}")
        if self.min_calls < 1:
            raise ValueError(f"breaker minimum calls must be at least 1, got {self.min_calls}")
        if not (math.isfinite(self.window_s) and self.window_s >= 1):
            raise ValueError(f"breaker window must be at least 1s, got {self.window_s:g}s")

    @classmethod
    def parse(cls, text: str) -> BreakerRule:
        """``"50%/20/30s"``: RATE%/MIN_CALLS/WINDOW. ValueError with one line otherwise."""
        parts = [part.strip() for part in text.split("/")]
        if len(parts) != 3:
            raise ValueError(
                f"invalid breaker rule {text!r}: expected RATE%/MIN_CALLS/WINDOW, e.g. 50%/20/30s"
            )
        rate, calls, window = parts
        if not _RATE.match(rate):
            raise ValueError(f"invalid breaker rule {text!r}: rate {rate!r} is not a percentage "
                             "such as 50%")  # fmt: skip
        if not calls.isdigit():
            raise ValueError(f"invalid breaker rule {text!r}: minimum calls {calls!r} is not "
                             "a whole number")  # fmt: skip
        try:
            window_s = parse_duration(window).total_seconds()
        except ValueError as exc:
            raise ValueError(f"invalid breaker rule {text!r}: window: {exc}") from None
        try:
            return cls(rate=float(rate[:-1]) / 100, min_calls=int(calls), window_s=window_s)
        except ValueError as exc:
            raise ValueError(f"invalid breaker rule {text!r}: {exc}") from None

    def describe(self) -> str:
        return f"{self.rate * 100:g}%/{self.min_calls}/{self.window_s:g}s"


DEFAULT_RULE = BreakerRule()


@dataclass(frozen=True, kw_only=True)
class BreakerSettings:
    """Rules per job type (``default`` for the others; None: no breaker for them), the
    cool-down after the first opening and its cap, and the probes of a half-open one."""

    # Off unless asked for: a queue whose jobs fail in bulk on purpose (a test, a
    # backfill of doomed jobs) should not start parking them by surprise.
    default: BreakerRule | None = None
    by_type: Mapping[str, BreakerRule] = field(default_factory=dict)
    cooldown_s: float = 15.0
    cooldown_max_s: float = 300.0
    probes: int = 3
    # A probe not settled after this long no longer holds its slot (its partition
    # moved, so its outcome never comes back here).
    probe_stale_s: float = 120.0
    # Jobs parked while an operator holds a breaker open wait this many cool-downs
    # each time (a minute with the defaults): short enough that they run soon after
    # the operator closes it, long enough not to churn the tiers meanwhile.
    forced_park_cooldowns: float = 4.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_type", dict(self.by_type))
        if not (0 < self.cooldown_s <= self.cooldown_max_s and math.isfinite(self.cooldown_max_s)):
            raise ValueError(
                f"breaker cool-down must be > 0 and at most its cap, got {self.cooldown_s:g}s "
                f"(cap {self.cooldown_max_s:g}s)"
            )
        if self.probes < 1:
            raise ValueError(f"breaker probes must be at least 1, got {self.probes}")

    @property
    def forced_park_s(self) -> float:
        return self.cooldown_s * self.forced_park_cooldowns

    def rule_for(self, job_type: str) -> BreakerRule | None:
        return self.by_type.get(job_type, self.default)
