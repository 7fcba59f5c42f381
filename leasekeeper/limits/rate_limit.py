"""Rate limits per job type and per tenant: token buckets checked at claim time.

A job type that calls a partner API with a quota (``send_sms=100/s``), or a
tenant on a plan (``--tenant-rate-limit 20/s``), must not be dispatched faster
than its rate, however many workers are idle. The buckets live in the
leasekeeper, where every claim of every worker passes, under the engine's lock:
one bucket per limited type, and one per tenant once a tenant limit is set.

A bucket holds up to one second of its rate (at least one token), so a quiet
type may start a short burst but its rate over any window of a few seconds stays
at the limit. Several leasekeepers share a queue's partitions: each one applies
the fraction of every type's rate that its share of the ready partitions gives
it (``set_share``). That is exact when the jobs of a type are spread evenly over
the partitions, and an approximation otherwise. A tenant's jobs are keyed to
one partition per topic, so the leasekeeper owning it sees them all: tenant
limits apply whole (see docs/operations.md for both approximations).

A job over its limit is never failed: it waits in the window, and the window
keeps only a few seconds' worth of it (``hold_cap``); the excess is parked back
in a delay tier (see ``parking``), so a backlog of a limited type cannot fill
the window and starve the other types.

Written by hand rather than with a rate-limit library: the claim path needs to
peek without taking, rescale the rates when partitions move, report the tokens
left, and run on the engine's injected clock in tests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from leasekeeper.core.recent import RECENT_LIMIT, RecentKeys

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|m|h)\s*$")

# The window holds at most this many seconds of a limited key's dispatches...
HOLD_S = 5.0
# ...and never less than this many of its jobs (workers need something to claim)...
MIN_HOLD = 10
# ...and never more than this share of the window's records.
MAX_WINDOW_SHARE = 0.25


@dataclass(frozen=True)
class Rate:
    """A limit as given (``100/s``, ``600/m``, ``20/h``) and in jobs per second."""

    per_s: float
    text: str

    @property
    def burst(self) -> float:
        """Tokens a full bucket holds: one second's worth, at least one job."""
        return max(1.0, self.per_s)


def parse_rate(text: str, flag: str) -> Rate:
    """``N/s``, ``N/m`` or ``N/h`` with N > 0; a ValueError naming ``flag`` otherwise."""
    match = _RATE.match(text)
    number = float(match.group(1)) if match else 0.0
    if match is None or not math.isfinite(number) or number <= 0:
        raise ValueError(
            f"{flag} {text!r}: expected a rate N/s, N/m or N/h with N > 0 (e.g. 100/s)"
        )
    return Rate(per_s=number / _UNITS[match.group(2)], text=f"{match.group(1)}/{match.group(2)}")


def parse_rates(values: Iterable[str], flag: str, what: str) -> dict[str, Rate]:
    """``NAME=RATE`` pairs (``send_sms=100/s``); ``what`` names NAME in the error."""
    found: dict[str, Rate] = {}
    for value in values:
        name, sep, rate = value.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError(name)
            found[name.strip()] = parse_rate(rate, flag)
        except ValueError:
            raise ValueError(
                f"{flag} {value!r}: expected {what}=RATE, RATE being N/s, N/m or N/h with "
                f"N > 0 (e.g. {what.lower()}=100/s)"
            ) from None
    return found


@dataclass(frozen=True, kw_only=True)
class RateLimitConfig:
    """Limits per job type; a default limit for every tenant and limits for some."""

    by_type: Mapping[str, Rate] = field(default_factory=dict)
    tenant_default: Rate | None = None
    by_tenant: Mapping[str, Rate] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return bool(self.by_type or self.by_tenant or self.tenant_default)

    def for_tenant(self, tenant: str) -> Rate | None:
        return self.by_tenant.get(tenant, self.tenant_default)


def rate_limit_config(
    *, by_type: Iterable[str] = (), tenant: str | None = None, tenant_for: Iterable[str] = ()
) -> RateLimitConfig:
    """The limits from the CLI's ``--rate-limit``, ``--tenant-rate-limit`` and
    ``--tenant-rate-limit-for`` values (ValueError naming the flag and value)."""
    return RateLimitConfig(
        by_type=parse_rates(by_type, "--rate-limit", "TYPE"),
        tenant_default=None if tenant is None else parse_rate(tenant, "--tenant-rate-limit"),
        by_tenant=parse_rates(tenant_for, "--tenant-rate-limit-for", "TENANT"),
    )


class TokenBucket:
    """Tokens accrue at ``per_s`` up to ``burst``; a dispatch takes one."""

    def __init__(self, per_s: float, burst: float, now: float) -> None:
        self.per_s = per_s
        self.burst = burst
        self.tokens = burst
        self._at = now

    def refill(self, now: float) -> None:
        if now > self._at:
            self.tokens = min(self.burst, self.tokens + (now - self._at) * self.per_s)
        self._at = max(self._at, now)

    def ready(self) -> bool:
        return self.tokens >= 1.0

    def take(self) -> None:
        self.tokens -= 1.0

    def wait_s(self) -> float:
        """Seconds until one token is there (0 when one is); infinite at rate 0."""
        if self.tokens >= 1.0:
            return 0.0
        return math.inf if self.per_s <= 0 else (1.0 - self.tokens) / self.per_s

    def rescale(self, per_s: float, burst: float) -> None:
        """A new rate (the partition share changed): tokens kept, capped at ``burst``."""
        self.per_s = per_s
        self.burst = burst
        self.tokens = min(self.tokens, burst)

    @property
    def full(self) -> bool:
        return self.tokens >= self.burst


@dataclass(frozen=True, kw_only=True)
class LimiterView:
    """One limiter for ``inspect`` and metrics: its rate here, tokens, jobs waiting."""

    kind: str  # "type" or "tenant"
    key: str
    limit: str  # as configured, for the whole queue
    rate_per_s: float  # this leasekeeper's share of it
    tokens: float
    waiting: int  # ready jobs of this key in the window
    parked: int  # jobs of this key parked in a delay tier since start
    dispatched: int  # jobs of this key dispatched since start


class RateLimits:
    """The buckets of one leasekeeper; the engine's lock guards it."""

    def __init__(
        self,
        config: RateLimitConfig,
        monotonic: Callable[[], float],
        *,
        recent: int = RECENT_LIMIT,
    ) -> None:
        self.config = config
        self._monotonic = monotonic
        self._share = 1.0
        now = monotonic()
        self._types = {
            t: TokenBucket(rate.per_s, rate.burst, now) for t, rate in config.by_type.items()
        }
        self._tenants: dict[str, TokenBucket] = {}
        self._parked: dict[tuple[str, str], int] = {}
        self._dispatched: dict[tuple[str, str], int] = {}
        # Tenants whose bucket was dropped as idle: their counts are kept while they
        # are recent, then dropped too (tenant ids are unbounded).
        self._idle: RecentKeys[str] = RecentKeys(recent)

    @property
    def active(self) -> bool:
        return self.config.active

    @property
    def share(self) -> float:
        return self._share

    def set_share(self, share: float) -> None:
        """This leasekeeper's fraction of the queue's ready partitions: each rate is
        scaled by it, so the leasekeepers of a queue together keep to the limit."""
        share = min(1.0, max(0.0, share))
        if share == self._share:
            return
        self._share = share
        self.refill()
        for job_type, bucket in self._types.items():
            rate = self.config.by_type[job_type]
            bucket.rescale(rate.per_s * share, self._burst(rate, share))

    @staticmethod
    def _burst(rate: Rate, share: float = 1.0) -> float:
        return max(1.0, rate.burst * share)

    def refill(self) -> None:
        """Bring every bucket up to now (once per claim, not once per job)."""
        now = self._monotonic()
        for bucket in self._types.values():
            bucket.refill(now)
        for bucket in self._tenants.values():
            bucket.refill(now)

    def _tenant(self, tenant: str) -> TokenBucket | None:
        bucket = self._tenants.get(tenant)
        if bucket is None:
            rate = self.config.for_tenant(tenant)
            if rate is None:
                return None
            bucket = TokenBucket(rate.per_s, rate.burst, self._monotonic())
            self._tenants[tenant] = bucket
            self._idle.active(tenant)
        return bucket

    def admits(self, job_type: str, tenant: str) -> bool:
        """Whether a job of ``job_type`` for ``tenant`` may be dispatched now."""
        bucket = self._types.get(job_type)
        if bucket is not None and not bucket.ready():
            return False
        tenant_bucket = self._tenant(tenant)
        return tenant_bucket is None or tenant_bucket.ready()

    def take(self, job_type: str, tenant: str) -> None:
        """A job of ``job_type`` for ``tenant`` was dispatched: one token from each."""
        bucket = self._types.get(job_type)
        if bucket is not None:
            bucket.take()
            self._count(self._dispatched, ("type", job_type))
        tenant_bucket = self._tenant(tenant)
        if tenant_bucket is not None:
            tenant_bucket.take()
            self._count(self._dispatched, ("tenant", tenant))

    def wait_s(self, job_types: Iterable[str], tenants: Iterable[str]) -> float:
        """The shortest wait until one of these types' or tenants' buckets has a token
        (0 if one has one now, or one of them is unlimited)."""
        waits = [self._types[t].wait_s() if t in self._types else 0.0 for t in job_types]
        waits += [b.wait_s() if (b := self._tenant(t)) else 0.0 for t in tenants]
        return min(waits, default=0.0)

    def limited_type(self, job_type: str) -> bool:
        return job_type in self._types

    def hold_cap(self, per_s: float, window_records: int) -> int:
        """How many ready jobs of one limited key the window keeps: ``HOLD_S`` seconds
        of its rate, at least ``MIN_HOLD``, at most ``MAX_WINDOW_SHARE`` of the window."""
        most = max(1, int(window_records * MAX_WINDOW_SHARE))
        return min(most, max(MIN_HOLD, math.ceil(per_s * HOLD_S)))

    def type_rate(self, job_type: str) -> float | None:
        bucket = self._types.get(job_type)
        return None if bucket is None else bucket.per_s

    def tenant_rate(self, tenant: str) -> float | None:
        rate = self.config.for_tenant(tenant)
        return None if rate is None else rate.per_s

    def parked(self, kind: str, key: str, count: int) -> None:
        self._count(self._parked, (kind, key), count)
        if kind == "tenant" and key not in self._tenants:
            self._went_idle(key)

    @staticmethod
    def _count(counts: dict[tuple[str, str], int], key: tuple[str, str], n: int = 1) -> None:
        counts[key] = counts.get(key, 0) + n

    def forget_idle_tenants(self) -> None:
        """Drop full tenant buckets (a full bucket is what a new one starts as): tenant
        ids are unbounded, the buckets must not be."""
        self.refill()
        for tenant in [t for t, b in self._tenants.items() if b.full]:
            del self._tenants[tenant]
            self._went_idle(tenant)

    def _went_idle(self, tenant: str) -> None:
        for gone in self._idle.idle(tenant):
            self._dispatched.pop(("tenant", gone), None)
            self._parked.pop(("tenant", gone), None)

    def views(
        self, waiting_types: Mapping[str, int], waiting_tenants: Mapping[str, int]
    ) -> list[LimiterView]:
        """Every type limiter, and the tenant limiters with a bucket or jobs waiting."""
        self.refill()
        views = [
            self._view(
                "type", t, self.config.by_type[t], b.per_s, b.tokens, waiting_types.get(t, 0)
            )
            for t, b in sorted(self._types.items())
        ]
        tenants = set(self._tenants) | {t for t, n in waiting_tenants.items() if n}
        tenants |= set(self.config.by_tenant)
        for tenant in sorted(tenants):
            rate = self.config.for_tenant(tenant)
            if rate is None:
                continue
            bucket = self._tenants.get(tenant)
            tokens = bucket.tokens if bucket is not None else rate.burst
            waiting = waiting_tenants.get(tenant, 0)
            views.append(self._view("tenant", tenant, rate, rate.per_s, tokens, waiting))
        return views

    def _view(
        self, kind: str, key: str, rate: Rate, per_s: float, tokens: float, waiting: int
    ) -> LimiterView:
        return LimiterView(
            kind=kind,
            key=key,
            limit=rate.text,
            rate_per_s=round(per_s, 6),
            tokens=round(tokens, 3),
            waiting=waiting,
            parked=self._parked.get((kind, key), 0),
            dispatched=self._dispatched.get((kind, key), 0),
        )
