"""What the lease engine's parts share: the settings the core reads, the counters,
and the context passed to each part."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Protocol

from leasekeeper.core.control_state import ControlState
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.resolved_ids import ResolvedIds
from leasekeeper.core.retry_policy import RetryPolicies
from leasekeeper.core.store import LeaseStore


class TenantCaps(Protocol):
    """How many jobs of a tenant may run at once (fairness's ``TenantPolicy``)."""

    @property
    def capped(self) -> bool: ...

    def at_cap(self, tenant: str, running: int) -> bool: ...


class CoreSettings(Protocol):
    """The settings the core reads; ``leasekeeper.engine.EngineConfig`` has them and the
    features' own. Documented there."""

    @property
    def queue(self) -> str: ...
    @property
    def retries(self) -> RetryPolicies: ...
    @property
    def timeout_grace_s(self) -> float: ...
    @property
    def settle_in_max_s(self) -> float: ...
    @property
    def unknown_type_grace_s(self) -> float: ...
    @property
    def worker_seen_s(self) -> float: ...
    @property
    def status_records(self) -> bool: ...
    @property
    def max_result_bytes(self) -> int: ...
    @property
    def tenants(self) -> TenantCaps: ...

    def lease_for(self, job_type: str) -> float: ...


def _counter(help_text: str) -> int:
    """A counter field starting at 0, with the help text its metric is exported with."""
    return field(default=0, metadata={"help": help_text})


def counter_help() -> dict[str, str]:
    """Counter name → help text, in field order (what metrics export)."""
    return {f.name: f.metadata["help"] for f in fields(Counters)}


@dataclass(kw_only=True)
class Counters:
    """What happened to jobs since start. ``inspect`` and metrics iterate the fields, so a
    counter added here is shown and exported without another edit."""

    acked: int = _counter("jobs acked by workers")
    nacked: int = _counter("jobs nacked by workers")
    released: int = _counter("jobs released unrun by stopping workers")
    expired: int = _counter("leases taken back by the reaper (expired, or past timeout_s)")
    refunded: int = _counter(
        "expired leases of jobs that never started (prefetched): attempt given back"
    )
    retried: int = _counter("failed jobs copied back to the queue for another attempt")
    dead: int = _counter("jobs copied to the dead-letter topic")
    skipped: int = _counter("fetched jobs skipped as already resolved (after a restart or move)")
    cancelled: int = _counter("jobs skipped or taken back because they were cancelled")
    deduplicated: int = _counter("jobs skipped because their dedupe key was used by another job")
    parked: int = _counter(
        "jobs parked in a delay tier without spending an attempt by a circuit breaker "
        "(rate limits count theirs per limiter)"
    )
    stale_rejected: int = _counter(
        "heartbeats, acks and nacks refused for a stale or unknown lease token"
    )
    resolved_again: int = _counter(
        "fetched copies of jobs already acked here within the resolved-id window, skipped"
    )
    schema_waits: int = _counter(
        "retries, dead letters, parks and overflow moves held because the Schema Registry "
        "could not give the job envelope's schema (built again once it answers)"
    )


@dataclass(frozen=True, kw_only=True)
class EngineContext:
    """What every part of the engine shares: settings, the store, the counters, the
    control state, and the clocks (``clock`` wall time, ``monotonic`` for deadlines)."""

    config: CoreSettings
    store: LeaseStore
    counters: Counters
    control: ControlState
    clock: Callable[[], float]
    monotonic: Callable[[], float]
    # Decodes a job's envelope when a copy must rewrite it or ``inspect job`` shows it.
    reader: JobReader
    # Ids of the jobs acked here lately: a later copy of one is skipped.
    resolved: ResolvedIds = field(default_factory=ResolvedIds)
