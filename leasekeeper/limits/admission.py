"""Rate limits where the engine dispatches: at claim time, and in the window.

Three hooks, all under the engine's lock:

- ``accept``: the claim's filter also refuses a job whose type or tenant has no
  token left, so the dispatch policy serves the next eligible job instead;
  ``granted`` takes the tokens of each job leased;
- ``wait_s``: how long a claimer that found only limited jobs waits for the next
  token, instead of returning empty at once and polling again;
- ``park_excess``: a limited type (or tenant) keeps only ``hold_cap`` ready jobs
  in the window; the newest beyond that are parked in a delay tier, each for
  about as long as the jobs before it take to go out at the limit, so they come
  back when they can run and the window stays free for every other type.

``set_share`` follows the partitions this leasekeeper owns (see rate_limit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.hooks import Accept, LeaseEnd
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.leases import Lease, Pending, Settlement, TopicPart
from leasekeeper.core.parking import park
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.window import ReadyWindow
from leasekeeper.limits.rate_limit import LimiterView, RateLimits

# How often the window is checked for the excess of a limited type (seconds).
PARK_INTERVAL_S = 0.1
# Longest a claimer sleeps at once waiting for a token (it re-checks after).
MAX_TOKEN_WAIT_S = 0.5
# Past this many keys, the horizons already passed are dropped (at most once a check).
HORIZONS_KEPT = 1_000


@dataclass(frozen=True, kw_only=True)
class LimitsSnapshot:
    """Every limiter of this leasekeeper and its share of the queue's partitions."""

    share: float
    limiters: tuple[LimiterView, ...]


class LimitDispatch:
    def __init__(
        self,
        *,
        limits: RateLimits,
        window: ReadyWindow,
        book: PartitionBook,
        window_records: int,
        monotonic: Callable[[], float],
        reader: JobReader | None = None,
    ) -> None:
        self._reader = reader
        self.limits = limits
        self._window = window
        self._book = book
        self._window_records = window_records
        self._monotonic = monotonic
        self._checked_at = float("-inf")
        self._topics: frozenset[str] = frozenset()
        # Per limited type or tenant: the monotonic time of the next dispatch slot not
        # promised to a parked job yet.
        self._horizon: dict[tuple[str, str], float] = {}
        self._partitions = 0

    @property
    def active(self) -> bool:
        return self.limits.active

    # -- claim time -----------------------------------------------------------

    def accept(self, accept: Callable[[Pending], bool] | None) -> Callable[[Pending], bool] | None:
        """``accept`` narrowed to jobs whose type and tenant have a token now."""
        if not self.active:
            return accept
        self.limits.refill()
        admits = self.limits.admits
        if accept is None:
            return lambda p: admits(p.job.type, p.job.tenant_id)
        inner = accept
        return lambda p: inner(p) and admits(p.job.type, p.job.tenant_id)

    def granted(self, pending: Pending) -> None:
        if self.active:
            self.limits.take(pending.job.type, pending.job.tenant_id)

    # -- the rest of the DispatchGate protocol (core/hooks.py) -------------------------

    def narrow(self, accept: Accept) -> Accept:
        return self.accept(accept)

    def admit(self, pending: Pending) -> CopyRequest | None:
        return None  # a limited job is never popped: ``narrow`` hides it until a token

    def ended(self, lease: Lease, end: LeaseEnd, settlement: Settlement | None) -> None:
        pass  # a token is spent on the lease, whatever its end

    def sweep(self, window: ReadyWindow) -> list[CopyRequest]:
        return []  # the excess over a limit is parked on the loop's own turn (park_excess)

    def wait_s(self, job_types: frozenset[str]) -> float:
        """How long a claimer that got nothing waits for a token: 0 when no limit
        holds its jobs back (then it is answered at once, as without limits)."""
        if not self.active:
            return 0.0
        self.limits.refill()
        types = job_types or frozenset(self.limits.config.by_type)
        ready = self._window.ready_of_type
        limited = [t for t in types if self.limits.limited_type(t) and ready(t)]
        tenants: Iterable[str] = ()
        if self.limits.config.tenant_default or self.limits.config.by_tenant:
            tenants = [t for t, n in self._window.ready_by_tenant().items() if n]
        if not limited and not tenants:
            return 0.0
        wait = self.limits.wait_s(limited, tenants)
        return min(MAX_TOKEN_WAIT_S, wait) if wait > 0 else 0.0

    # -- partitions ---------------------------------------------------------------

    def queue_partitions(self, topics: frozenset[str], partitions: int) -> None:
        """The topics this queue's leasekeepers consume (ready topics and delay tiers,
        all with ``partitions`` partitions): the whole a leasekeeper's share is of.
        Delay tiers count because retried and parked jobs are dispatched by the
        owner of their tier partition: a leasekeeper owning any partition has a
        share above zero, and the shares of all add up to one."""
        self._topics = topics
        self._partitions = partitions
        self.follow_partitions()

    def assigned(self, tp: TopicPart, metadata: str | None) -> None:
        self.follow_partitions()

    def revoked(self, tp: TopicPart, *, held: bool) -> None:
        self.follow_partitions()

    def follow_partitions(self) -> None:
        """Partitions came or went: each rate is this leasekeeper's share of it."""
        if not self._partitions or not self._topics:
            return
        owned = sum(1 for tp in self._book.parts if tp.topic in self._topics)
        self.limits.set_share(owned / (self._partitions * len(self._topics)))

    # -- the window -----------------------------------------------------------------

    def park_excess(self, now_ms: int) -> list[CopyRequest]:
        """Park the ready jobs of each limited type or tenant beyond its hold cap (at
        most once per ``PARK_INTERVAL_S``); returns the copies."""
        if not self.active:
            return []
        now = self._monotonic()
        if now - self._checked_at < PARK_INTERVAL_S:
            return []
        self._checked_at = now
        self._forget_past_horizons(now)
        actions: list[CopyRequest] = []
        for job_type in self.limits.config.by_type:
            rate = self.limits.type_rate(job_type) or 0.0
            excess = self._window.ready_of_type(job_type) - self._cap(rate)
            if excess > 0:
                actions += self._park("type", job_type, excess, rate, now_ms)
        if self.limits.config.tenant_default or self.limits.config.by_tenant:
            for tenant, ready in self._window.ready_by_tenant().items():
                tenant_rate = self.limits.tenant_rate(tenant)
                if tenant_rate is None:
                    continue
                excess = ready - self._cap(tenant_rate)
                if excess > 0:
                    actions += self._park("tenant", tenant, excess, tenant_rate, now_ms)
            self.limits.forget_idle_tenants()
        return actions

    def _forget_past_horizons(self, now: float) -> None:
        """A horizon in the past promises nothing (the next slot is at least ``now``
        anyway), so only keys with parked jobs still to come keep one: a map of every
        tenant ever parked would grow with uptime."""
        if len(self._horizon) > HORIZONS_KEPT:
            self._horizon = {key: at for key, at in self._horizon.items() if at > now}

    def _cap(self, rate: float) -> int:
        return self.limits.hold_cap(rate, self._window_records)

    def _park(
        self, kind: str, key: str, excess: int, rate: float, now_ms: int
    ) -> list[CopyRequest]:
        """Park the ``excess`` most recently enqueued ready jobs of one type (``kind``
        "type") or tenant. Each gets the next free dispatch slot at the limit after
        the jobs kept and those parked before (``_horizon``), so a parked job comes
        back about when it can run, and one coming back is older than the jobs
        fetched meanwhile: those are parked, not it."""

        def matches(pending: Pending) -> bool:
            job = pending.job
            return (job.type if kind == "type" else job.tenant_id) == key

        if rate <= 0:  # no partition here: nothing of this queue is dispatched here,
            return []  # and a job taken out of the window would be neither parked nor run
        ready = sorted((p for p in self._window.ready() if matches(p)), key=_enqueued)
        chosen = {id(p) for p in ready[len(ready) - excess :]}
        removed = sorted(self._window.remove_ready(lambda p: id(p) in chosen), key=_enqueued)
        now = self._monotonic()
        slot = max(self._horizon.get((kind, key), now), now + self._cap(rate) / rate)
        copies = []
        for pending in removed:
            state = self._book.live(pending)
            if state is None:
                continue  # its partition is moving: the next owner has it
            claims = state.claims.get(pending.offset, 0)
            copies.append(park(pending, delay_s=slot - now, now_ms=now_ms, claims=claims,
                               reader=self._reader))  # fmt: skip
            slot += 1 / rate
        self._horizon[(kind, key)] = slot
        self.limits.parked(kind, key, len(copies))
        return copies

    # -- inspection -----------------------------------------------------------------

    def snapshot(self) -> LimitsSnapshot | None:
        if not self.active:
            return None
        types = {t: self._window.ready_of_type(t) for t in self.limits.config.by_type}
        tenants: dict[str, int] = {}
        if self.limits.config.tenant_default or self.limits.config.by_tenant:
            tenants = self._window.ready_by_tenant()
        return LimitsSnapshot(
            share=round(self.limits.share, 4), limiters=tuple(self.limits.views(types, tenants))
        )


def _enqueued(pending: Pending) -> tuple[int, str]:
    return pending.job.created_at_ms, pending.job.job_id
