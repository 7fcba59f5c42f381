"""``leasekeeper serve``: its options parsed into a ``ServeConfig``, then the
service run until a signal or a failure, with the exit code a supervisor needs.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType

import click

from jobcore import gc_tuning
from jobcore.cli_env import environment
from jobcore.cli_kafka import KafkaSetupFailed, kafka_failure, kafka_settings
from jobcore.cli_registry import SchemaSetupFailed, registry_settings
from jobcore.delay_tiers import DelayTiers
from jobcore.durations import parse_duration
from jobcore.kafka import KafkaException
from jobcore.priority import PriorityClasses
from jobcore.schema_registry import RegistrySetupError
from jobcore.topic_admin import retention_ms
from jobcore.topics import QueueTopics
from leasekeeper.breaker.cli import breaker_settings
from leasekeeper.core.retry_policy import (
    DEFAULT_PERMANENT_ERRORS,
    Jitter,
    RetryPolicies,
    RetryPolicy,
)
from leasekeeper.engine import EngineConfig
from leasekeeper.fairness.ready_targets import ready_targets
from leasekeeper.fairness.tenant_config import tenant_policy
from leasekeeper.kafka.consumer_loop import LoopConfig
from leasekeeper.limits.rate_limit import rate_limit_config
from leasekeeper.ops.serve_options import serve_options
from leasekeeper.ops.service import LeaseKeeperService, ServeConfig
from leasekeeper.ordering.values import OnDead
from leasekeeper.rpc.listen import ListenError, parse_socket_mode, preflight
from schemas.codec import SchemaError

log = logging.getLogger(__name__)


@click.command()
@serve_options
def serve(
    queue: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    state_dir: Path,
    listen: str | None,
    lease_s: float,
    window_records: int,
    window_bytes: int,
    tenant_cap: int | None,
    tenant_cap_for: tuple[str, ...],
    tenant_weight: tuple[str, ...],
    tenants_file: Path | None,
    overflow_share: float,
    defer_floods: bool,
    rate_limit: tuple[str, ...],
    tenant_rate_limit: str | None,
    tenant_rate_limit_for: tuple[str, ...],
    max_uncommitted: int,
    group: str | None,
    group_id_alias: str | None,
    schema_path: tuple[str, ...],
    schema_registry: str | None,
    schema_registry_config: Path | None,
    priority_classes: PriorityClasses,
    instance_id: str | None,
    session_timeout_ms: int,
    lease_for: tuple[str, ...],
    drain_grace: float,
    metrics_port: int | None,
    ready_target: tuple[str, ...],
    retry_tiers: str,
    jitter: str,
    retry_base: float,
    retry_cap: float,
    retry_budget: float,
    retry_budget_floor: int,
    dedupe_window: float,
    permanent_error: tuple[str, ...],
    reset_state: bool,
    unknown_type_grace: float,
    status_retention: float | None,
    no_status: bool,
    on_dead: str,
    socket_mode: str,
    insecure: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    breaker_rules: tuple[str, ...],
    breaker_default: str,
    breaker_cooldown: float,
    breaker_cooldown_max: float,
    breaker_probes: int,
    log_level: str,
) -> None:
    """Consume QUEUE and lease its jobs to workers until SIGTERM or Ctrl-C.

    Waits for Kafka while it is unreachable (inspect answers meanwhile). Exits 2
    on a setup mistake (credentials, config, a missing queue), 1 when the Kafka
    loop fails, so a supervisor restarts it."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    env = environment()
    try:
        tenants = tenant_policy(
            cap=tenant_cap, cap_for=tenant_cap_for, weight_for=tenant_weight, path=tenants_file
        )
        targets = ready_targets(ready_target, priority_classes.weights)
        rate_limits = rate_limit_config(
            by_type=rate_limit, tenant=tenant_rate_limit, tenant_for=tenant_rate_limit_for
        )
        shared_group = QueueTopics(queue=queue, prefix=env.topic_prefix).consumer_group
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if (group or group_id_alias or shared_group) != shared_group:
        log.warning(
            "--group %s is not the group producers look up (%s: JOBS_GROUP, or the default); "
            "set JOBS_GROUP=%s for them too, or a tenant they divert stays diverted",
            group or group_id_alias, shared_group, group or group_id_alias,
        )  # fmt: skip
    if status_retention is not None and status_retention <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--status-retention")
    breakers = breaker_settings(rules=breaker_rules, default=breaker_default,
                                cooldown_s=breaker_cooldown, cooldown_max_s=breaker_cooldown_max,
                                probes=breaker_probes)  # fmt: skip
    config = ServeConfig(
        insecure=insecure,
        socket_mode=_socket_mode(socket_mode),
        tls_cert=tls_cert,
        tls_key=tls_key,
        queue=queue,
        kafka=kafka_settings(
            "leasekeeper", bootstrap=bootstrap, kafka_config=kafka_config, env=env
        ),
        state_dir=state_dir,
        listen=env.target(listen, queue=queue),
        prefix=env.topic_prefix,
        token=env.leasekeeper_token,
        group_id=group or group_id_alias,
        engine=EngineConfig(
            lease_s=lease_s,
            lease_s_by_type=_leases_by_type(lease_for),
            window_records=window_records,
            window_bytes=window_bytes,
            max_uncommitted=max_uncommitted,
            class_weights=priority_classes.weights,
            tenants=tenants,
            overflow_share=overflow_share,
            defer_floods=defer_floods,
            rate_limits=rate_limits,
            unknown_type_grace_s=unknown_type_grace,
            status_records=not no_status,
            on_dead=OnDead(on_dead),
            breakers=breakers,
            retries=RetryPolicies(
                default=RetryPolicy(
                    base_s=retry_base,
                    cap_s=retry_cap,
                    jitter=Jitter(jitter),
                    permanent_errors=DEFAULT_PERMANENT_ERRORS | frozenset(permanent_error),
                )
            ),
        ),
        tiers=_tiers(retry_tiers),
        retry_budget_share=retry_budget,
        retry_budget_floor=retry_budget_floor,
        dedupe_window_s=dedupe_window,
        loop=LoopConfig(drain_grace_s=drain_grace),
        metrics_port=metrics_port,
        ready_targets=targets,
        schema_dirs=schema_path,
        schema_registry=registry_settings(schema_registry, schema_registry_config),
        instance_id=instance_id,
        session_timeout_ms=session_timeout_ms,
        reset_state=reset_state,
        status_retention_ms=retention_ms(status_retention),
    )
    try:
        preflight(config.listen, config.security)
    except ListenError as exc:
        raise click.ClickException(str(exc)) from None
    _run_service(config)


def _run_service(config: ServeConfig) -> None:
    """Serve until a signal or a failure; a failure exits non-zero (2: setup)."""
    try:
        service = LeaseKeeperService(config)
    except KafkaException as exc:  # librdkafka refused the configuration itself
        raise kafka_failure(exc, config.kafka) from None
    except (SchemaError, RegistrySetupError) as exc:
        raise SchemaSetupFailed(str(exc)) from None
    stopper = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopper.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _start(service)
    gc_tuning.settle_after_startup()  # start-up's objects out of the collector's scans
    click.echo(f"leasekeeper serving queue {config.queue} on {config.listen}", err=True)
    while not stopper.wait(0.5):
        if service.wait(0):
            break
    service.stop()
    failure = service.failure
    if failure is None:
        click.echo("leasekeeper stopped", err=True)
        return
    if failure.exit_code == 2:
        raise KafkaSetupFailed(failure.message)
    raise click.ClickException(failure.message)


def _start(service: LeaseKeeperService) -> None:
    """Start serving, or exit with one line when the listen settings would let others in."""
    try:
        service.start()
    except ListenError as exc:
        service.stop()
        raise click.ClickException(str(exc)) from None


def _socket_mode(text: str) -> int:
    try:
        return parse_socket_mode(text)
    except ListenError as exc:
        raise click.BadParameter(str(exc), param_hint="--socket-mode") from None


def _tiers(spec: str) -> DelayTiers:
    try:
        return DelayTiers.parse(spec)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--retry-tiers") from None


def _leases_by_type(pairs: tuple[str, ...]) -> dict[str, float]:
    leases = {}
    for pair in pairs:
        job_type, _, length = pair.partition("=")
        try:
            leases[job_type] = parse_duration(length).total_seconds()
        except ValueError as exc:
            raise click.BadParameter(
                f"expected TYPE=DURATION, got {pair!r}: {exc}", param_hint="--lease-for"
            ) from None
        if not job_type or leases[job_type] <= 0:
            raise click.BadParameter(
                f"expected TYPE=DURATION > 0, got {pair!r}", param_hint="--lease-for"
            )
    return leases
