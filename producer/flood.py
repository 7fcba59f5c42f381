"""Which tenant's jobs this producer writes straight to the overflow lane.

A backfill written into a tenant's ready partition puts every other tenant of that
partition behind it: they are read in order, and the leasekeeper can only move the
flood aside by reading and copying it, a few thousand records a second on two
cores. The producer that writes the flood knows it is one while it writes it. So
a tenant whose jobs from this producer outrun a token bucket (``burst`` jobs at
once, ``rate`` a second after that) has its further due-now jobs written to
``jobs.Q.overflow``, keyed by tenant like the ready topic, where the leasekeeper
serves them at the tenant's weight. The flood never enters the ready partition.

Order within the tenant is kept at both ends of a diversion:

- **Going in.** The first diverted records carry a *switch* (``schemas.job_headers``):
  the ready partition and the offset of this producer's last record of the
  tenant there. The leasekeeper does not hand out a record with a switch until
  the group's commit of that ready partition has passed that offset, so the
  tenant's older jobs there have all been run (or moved) first; or until the
  switch's deadline (``hold_s`` after it began), so that one long job ahead of it in
  the ready partition does not stall the diverted jobs for its whole run.
- **Coming out.** The tenant goes back to the ready topic only once its bucket is
  half full again (it slowed down), every diverted record was delivered, and the
  group's commit of the overflow partition has passed the last of them: its
  next ready job cannot overtake a diverted one.

Pure data and decisions, with an injected clock; ``producer.diversion`` does the
Kafka side.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["ENV_FLOOD_BURST", "ENV_FLOOD_RATE", "Diversion", "FloodGate", "FloodPolicy"]

ENV_FLOOD_BURST = "JOBS_FLOOD_BURST"
ENV_FLOOD_RATE = "JOBS_FLOOD_RATE"

# Jobs of one tenant a producer may write to its ready partition at once, and a
# second after that, before the rest goes to the overflow lane. A tenant sending
# receipts or password resets stays far below; a backfill passes it in a blink.
DEFAULT_BURST = 1_000
DEFAULT_RATE = 500.0
# Longest a switch holds the diverted jobs back (see the module's docstring).
DEFAULT_HOLD_S = 30.0
# How often a diverted tenant's way back is looked up (a Kafka round trip).
CHECK_INTERVAL_S = 1.0
# Buckets kept at most: full buckets are dropped first (a full bucket is no state).
MAX_BUCKETS = 10_000


@dataclass(frozen=True, kw_only=True)
class FloodPolicy:
    """When a tenant's jobs from one producer count as a flood; ``burst=0`` turns
    diversion off."""

    burst: int = DEFAULT_BURST
    rate: float = DEFAULT_RATE
    hold_s: float = DEFAULT_HOLD_S

    def __post_init__(self) -> None:
        if self.burst < 0:
            raise ValueError(f"flood burst must be >= 0 (0 turns diversion off), not {self.burst}")
        if not self.rate > 0:
            raise ValueError(f"flood rate must be > 0 jobs/s, not {self.rate}")
        if not self.hold_s >= 0:
            raise ValueError(f"flood hold must be >= 0 s, not {self.hold_s}")

    @property
    def enabled(self) -> bool:
        return self.burst > 0

    @classmethod
    def off(cls) -> FloodPolicy:
        return cls(burst=0)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FloodPolicy:
        """``JOBS_FLOOD_BURST`` (jobs; 0 turns it off) and ``JOBS_FLOOD_RATE`` (jobs/s)."""
        env = os.environ if environ is None else environ
        burst, rate = env.get(ENV_FLOOD_BURST), env.get(ENV_FLOOD_RATE)
        try:
            return cls(
                burst=int(burst) if burst else DEFAULT_BURST,
                rate=float(rate) if rate else DEFAULT_RATE,
            )
        except ValueError as exc:
            raise ValueError(
                f"{ENV_FLOOD_BURST}={burst!r} / {ENV_FLOOD_RATE}={rate!r}: {exc}"
            ) from None


@dataclass(kw_only=True)
class Diversion:
    """One tenant of one ready topic being written to the overflow lane.

    ``switch``: (partition, offset) of the producer's last ready record of the
    tenant when it began (None: it had none there, nothing to wait for);
    ``deadline_ms``: when the switch stops holding (epoch ms); ``partition``/``last``:
    where the diverted records land (-1: none delivered yet); ``in_flight``: diverted
    records not yet delivered or failed."""

    switch: tuple[int, int] | None
    deadline_ms: int
    partition: int = -1
    last: int = -1
    in_flight: int = 0
    next_check: float = 0.0

    def delivered(self, partition: int, offset: int) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.partition = partition
        self.last = max(self.last, offset)

    def failed(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)


@dataclass(kw_only=True)
class _Bucket:
    tokens: float
    at: float


@dataclass(kw_only=True)
class FloodGate:
    """The token buckets and diversions, keyed by (ready topic, tenant)."""

    policy: FloodPolicy = field(default_factory=FloodPolicy)
    clock: Callable[[], float] = time.monotonic
    diversions: dict[tuple[str, str], Diversion] = field(default_factory=dict)
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)

    def over(self, key: tuple[str, str]) -> bool:
        """Take one job's token from ``key``'s bucket; True when there was none (the
        job is part of a flood)."""
        return self.take(key) < 0

    def take(self, key: tuple[str, str]) -> float:
        """Take one job's token from ``key``'s bucket: the tokens left, or -1 when there
        was none (the job is part of a flood)."""
        bucket = self._refill(key)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return bucket.tokens
        return -1.0

    def watched(self, left: float) -> bool:
        """Whether a tenant with ``left`` tokens may be about to flood: past half its
        burst. Only such a tenant's ready records are tracked for a switch (the last
        one before a switch always is); a calm tenant's cost nothing more."""
        return left < self.policy.burst / 2

    def calm(self, key: tuple[str, str]) -> bool:
        """Whether ``key``'s bucket is at least half full again (the tenant slowed)."""
        return self._refill(key).tokens >= self.policy.burst / 2

    def due_check(self, key: tuple[str, str]) -> bool:
        """Whether a diversion's way back should be looked up now (at most once per
        ``CHECK_INTERVAL_S``): it must be calm, and every diverted record delivered."""
        diversion = self.diversions.get(key)
        if diversion is None or diversion.in_flight or not self.calm(key):
            return False
        now = self.clock()
        if now < diversion.next_check:
            return False
        diversion.next_check = now + CHECK_INTERVAL_S
        return True

    def may_end(self, key: tuple[str, str], committed: int) -> bool:
        """End ``key``'s diversion when the overflow partition's commit (``committed``)
        has passed its last diverted record; returns whether it ended."""
        diversion = self.diversions.get(key)
        if diversion is None or diversion.in_flight or committed <= diversion.last:
            return False
        del self.diversions[key]
        return True

    def begin(self, key: tuple[str, str], switch: tuple[int, int] | None, now_ms: int) -> Diversion:
        diversion = Diversion(switch=switch, deadline_ms=now_ms + int(self.policy.hold_s * 1000))
        self.diversions[key] = diversion
        return diversion

    def _refill(self, key: tuple[str, str]) -> _Bucket:
        now = self.clock()
        bucket = self._buckets.get(key)
        burst = float(self.policy.burst)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._prune(now)
            bucket = self._buckets[key] = _Bucket(tokens=burst, at=now)
            return bucket
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.at) * self.policy.rate)
        bucket.at = now
        return bucket

    def _prune(self, now: float) -> None:
        """Drop the buckets that are full by now (they hold nothing a new one would
        not), then, if still too many, the oldest ones not diverted."""
        burst = float(self.policy.burst)
        for key, b in list(self._buckets.items()):
            if b.tokens + (now - b.at) * self.policy.rate >= burst:
                del self._buckets[key]
        if len(self._buckets) >= MAX_BUCKETS:
            oldest = sorted(self._buckets, key=lambda k: self._buckets[k].at)
            for key in oldest[: len(self._buckets) - MAX_BUCKETS // 2]:
                if key not in self.diversions:
                    del self._buckets[key]
