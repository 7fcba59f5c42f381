"""What one ``leasekeeper serve`` is told: its queue, Kafka, state directory, RPC
listener and the engine's settings, as one value the command line builds."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaSettings
from jobcore.schema_registry import RegistrySettings
from leasekeeper.core.retry_budget import DEFAULT_MIN_RETRIES, DEFAULT_SHARE
from leasekeeper.engine import EngineConfig
from leasekeeper.fairness.ready_targets import DEFAULT_READY_TARGETS
from leasekeeper.kafka.consumer_loop import LoopConfig
from leasekeeper.rpc.listen import DEFAULT_SOCKET_MODE, ChannelSecurity

__all__ = ["ServeConfig"]


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    queue: str
    kafka: KafkaSettings
    state_dir: Path
    listen: str
    prefix: str = "jobs"
    token: str | None = None
    # TCP without a token (loopback only); socket permissions; TLS for TCP.
    insecure: bool = False
    socket_mode: int = DEFAULT_SOCKET_MODE
    tls_cert: Path | None = None
    tls_key: Path | None = None
    group_id: str | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    schema_dirs: tuple[str, ...] = ()
    # Registry mode (Confluent wire format); None keeps the embedded file registry.
    schema_registry: RegistrySettings | None = None
    member_id: str = field(default_factory=socket.gethostname)
    # Static group membership: a leasekeeper restarted with the same instance id
    # gets its partitions back at once instead of after the session timeout.
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    metrics_port: int | None = None
    # Each priority class's ready target, exported for the alert rules (ready_targets).
    ready_targets: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_READY_TARGETS))
    tiers: DelayTiers = field(default_factory=DelayTiers)
    retry_budget_share: float = DEFAULT_SHARE
    # Retries always allowed per minute, however quiet the queue: a budget of 10%
    # of a handful of jobs would hold a small queue's retries back for minutes.
    retry_budget_floor: int = DEFAULT_MIN_RETRIES
    dedupe_window_s: float = 24 * 3600
    # On a state dir of another cluster, group or topic: wipe it instead of refusing.
    reset_state: bool = False
    # Seconds between snapshots published to jobs._leasekeepers (0: none).
    publish_interval_s: float = 3.0
    # retention.ms of jobs.Q.status, set at start; None leaves the topic's own.
    status_retention_ms: int | None = None

    @property
    def security(self) -> ChannelSecurity:
        return ChannelSecurity(
            token=self.token,
            insecure=self.insecure,
            socket_mode=self.socket_mode,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
        )
