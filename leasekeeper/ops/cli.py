"""``leasekeeper`` command line: serve, inspect, dev kafka."""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import click

from jobcore import gc_tuning
from jobcore.cli_env import (
    environment,
    priority_classes_option,
    schema_path_option,
    target_option,
    token_option,
    topic_prefix_option,
)
from jobcore.cli_errors import FriendlyGroup, log_level_option
from jobcore.cli_kafka import (
    KafkaSetupFailed,
    bootstrap_option,
    kafka_config_option,
    kafka_failure,
    kafka_settings,
)
from jobcore.cli_registry import SchemaSetupFailed, registry_settings, schema_registry_options
from jobcore.delay_tiers import DEFAULT_TIERS, DelayTiers
from jobcore.durations import DURATION, parse_duration, shown
from jobcore.kafka import KafkaException
from jobcore.priority import PriorityClasses
from jobcore.schema_registry import RegistrySetupError
from jobcore.topic_admin import STATUS_RETENTION_HELP, retention_ms
from leasekeeper.breaker.cli import breaker, breaker_settings
from leasekeeper.breaker.settings import BreakerSettings
from leasekeeper.core.engine import EngineConfig
from leasekeeper.core.retry_budget import DEFAULT_MIN_RETRIES, DEFAULT_SHARE
from leasekeeper.core.retry_policy import (
    DEFAULT_PERMANENT_ERRORS,
    Jitter,
    RetryPolicies,
    RetryPolicy,
)
from leasekeeper.dashboard.cli import dashboard
from leasekeeper.dlq.cli import dlq
from leasekeeper.fairness.ready_targets import ready_targets
from leasekeeper.fairness.tenant_config import tenant_policy
from leasekeeper.kafka.consumer_loop import LoopConfig
from leasekeeper.limits.rate_limit import rate_limit_config
from leasekeeper.ops.inspect_cli import inspect
from leasekeeper.ops.service import LeaseKeeperService, ServeConfig
from leasekeeper.ordering.cli import ordering
from leasekeeper.ordering.keys import OnDead
from leasekeeper.rpc.listen import ListenError, parse_socket_mode, preflight
from schemas.codec import SchemaError

# Defaults come from the config dataclasses, so the CLI and a Python caller agree.
_ENGINE = EngineConfig()
_LOOP = LoopConfig()
_POLICY = RetryPolicy()
_BREAKERS = BreakerSettings()
_SERVE_FIELDS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ServeConfig)}


@click.group(cls=FriendlyGroup)
def main() -> None:
    """The lease-tracking sidecar of the job queue."""


@main.command()
@click.option("--queue", required=True, help="the queue to serve (topic jobs.QUEUE)")
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@click.option("--state-dir", type=click.Path(path_type=Path), required=True, help="RocksDB dir")
@target_option(
    "--listen",
    "listen",
    help_text="unix:PATH or HOST:PORT [default: the queue's own socket in a private directory]",
)
@token_option("Shared token every client must present on a TCP listener.")
@click.option(
    "--lease",
    "lease_s",
    type=DURATION,
    default=shown(_ENGINE.lease_s),
    show_default=True,
    help="lease length (30s, 2m)",
)
@click.option("--window-records", default=_ENGINE.window_records, show_default=True)
@click.option("--window-bytes", default=_ENGINE.window_bytes, show_default=True)
@click.option(
    "--max-uncommitted",
    type=click.IntRange(min=1),
    default=_ENGINE.max_uncommitted,
    show_default=True,
    help="stop leasing while this many finished jobs are in no commit Kafka accepted "
    "(the group coordinator is down): bounds what a partition move runs again",
)
@click.option(
    "--tenant-cap",
    type=int,
    default=None,
    help="skip, at claim time, a tenant already running this many jobs (all workers)",
)
@click.option("--tenant-cap-for", multiple=True, metavar="TENANT=N", help="one tenant's cap")
@click.option(
    "--tenant-weight",
    multiple=True,
    metavar="TENANT=W",
    help="a tenant's weight in weighted fair queuing by handler time (default 1)",
)
@click.option(
    "--tenants",
    "tenants_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="TOML file of tenant weights and caps ([defaults], [tenants.NAME]); flags win",
)
@click.option(
    "--overflow-share",
    type=click.FloatRange(min=0.0, max=1.0),
    default=_ENGINE.overflow_share,
    show_default=True,
    help="a tenant holding more than this share of its partition's slice of a full "
    "window moves to the overflow lane (jobs.QUEUE.overflow), e.g. 0.5; 0 leaves the "
    "lane off",
)
@click.option(
    "--rate-limit",
    multiple=True,
    metavar="TYPE=N/s",
    help="dispatch at most N jobs of TYPE per second (/m, /h) over this queue's "
    "leasekeepers; repeatable. Jobs over it wait, never fail",
)
@click.option(
    "--tenant-rate-limit",
    default=None,
    metavar="N/s",
    help="dispatch at most N jobs per second (/m, /h) of every tenant",
)
@click.option(
    "--tenant-rate-limit-for",
    multiple=True,
    metavar="TENANT=N/s",
    help="one tenant's rate limit (repeatable; wins over --tenant-rate-limit)",
)
@click.option("--group", default=None, help="consumer group (default leasekeeper.jobs.QUEUE)")
@click.option("--group-id", "group_id_alias", default=None, hidden=True)
@schema_path_option("schema_path")
@schema_registry_options
@priority_classes_option
@click.option(
    "--instance-id",
    default=None,
    help="static group membership: restarting with the same id takes the partitions back at once",
)
@click.option(
    "--session-timeout-ms", default=_SERVE_FIELDS["session_timeout_ms"], show_default=True
)
@click.option(
    "--lease-for",
    multiple=True,
    metavar="TYPE=DURATION",
    help="lease length for one job type (repeatable), e.g. resize_image=5m",
)
@click.option(
    "--drain-grace",
    type=DURATION,
    default=shown(_LOOP.drain_grace_s),
    show_default=True,
    help="how long moving or stopping partitions wait for jobs in flight",
)
@click.option("--metrics-port", type=int, default=None, help="serve Prometheus /metrics here")
@click.option(
    "--ready-target",
    multiple=True,
    metavar="CLASS=DURATION",
    help="how long the oldest ready job of a priority class may wait before the example "
    "alert fires (exported as a metric; defaults critical=1s, default=30s, bulk=10m)",
)
@click.option(
    "--retry-tiers",
    default=",".join(DEFAULT_TIERS),
    show_default=True,
    help="delay tiers (topics jobs.QUEUE.retry.<tier>)",
)
@click.option(
    "--jitter",
    type=click.Choice([j.value for j in Jitter], case_sensitive=False),
    default=_POLICY.jitter.value,
    show_default=True,
)
@click.option(
    "--retry-base",
    type=DURATION,
    default=shown(_POLICY.base_s),
    show_default=True,
    help="backoff base",
)
@click.option(
    "--retry-cap",
    type=DURATION,
    default=shown(_POLICY.cap_s),
    show_default=True,
    help="backoff cap",
)
@click.option(
    "--retry-budget",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=DEFAULT_SHARE,
    show_default=True,
    help="share of recent throughput retries may use",
)
@click.option(
    "--retry-budget-floor",
    type=click.IntRange(min=1),
    default=DEFAULT_MIN_RETRIES,
    show_default=True,
    help="retries always allowed per 60 s window, however quiet the queue",
)
@click.option(
    "--dedupe-window",
    type=DURATION,
    default=shown(_SERVE_FIELDS["dedupe_window_s"]),
    show_default=True,
    help="how long a dedupe key blocks later jobs with the same key (from the first)",
)
@click.option(
    "--permanent-error",
    multiple=True,
    help="an exception class name that is never retried (repeatable)",
)
@click.option(
    "--reset-state",
    is_flag=True,
    help="when --state-dir belongs to another cluster, group or topic, wipe it "
    "instead of refusing to start",
)
@click.option(
    "--unknown-type-grace",
    type=DURATION,
    default=shown(_ENGINE.unknown_type_grace_s),
    show_default=True,
    help="how long a job no connected worker runs waits before it fails as UnknownJobType",
)
@click.option("--status-retention", type=DURATION, default=None, help=STATUS_RETENTION_HELP)
@click.option(
    "--no-status",
    is_flag=True,
    help="write no jobs.QUEUE.status records for this queue (give it to every leasekeeper "
    "of the queue): lookups of finished jobs then answer that records are off",
)
@click.option(
    "--on-dead",
    type=click.Choice([o.value for o in OnDead]),
    default=OnDead.CONTINUE.value,
    show_default=True,
    help="when an ordered job (ordering key) is dead-lettered: its key's next job runs "
    "(continue), or the key waits until `leasekeeper ordering replay|skip` (block)",
)
@click.option(
    "--socket-mode",
    default="0600",
    show_default=True,
    help="permissions of the Unix socket; 0660 shares it with the group",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="listen on loopback TCP without a token (any local user can connect)",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="TLS certificate (PEM) for a TCP listener",
)
@click.option(
    "--tls-key",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="TLS private key (PEM) for a TCP listener",
)
@click.option(
    "--breaker",
    "breaker_rules",
    multiple=True,
    metavar="TYPE[=RATE%/MIN/WINDOW]",
    help="a job type's circuit breaker: open when RATE of at least MIN calls in WINDOW "
    "failed, e.g. send_receipt=50%/20/30s; TYPE alone: 50%/20/30s (repeatable)",
)
@click.option(
    "--breaker-default",
    default=_BREAKERS.default.describe() if _BREAKERS.default else "off",
    show_default=True,
    metavar="RATE%/MIN/WINDOW|on|off",
    help="the breaker rule of every other job type; on: 50%/20/30s; off: breakers only "
    "for --breaker types (and for a type whose handler raised DependencyDown)",
)
@click.option(
    "--breaker-cooldown",
    type=DURATION,
    default=shown(_BREAKERS.cooldown_s),
    show_default=True,
    help="how long a breaker stays open before probes; doubled each time a probe fails",
)
@click.option(
    "--breaker-cooldown-max",
    type=DURATION,
    default=shown(_BREAKERS.cooldown_max_s),
    show_default=True,
    help="the cap of the doubled cool-down",
)
@click.option(
    "--breaker-probes",
    type=click.IntRange(min=1),
    default=_BREAKERS.probes,
    show_default=True,
    help="jobs a half-open breaker dispatches to test the dependency",
)
@log_level_option()
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
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
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


class _DevCommands(click.Group):
    """``dev`` subcommands, imported only when one is asked for: the runtime never loads
    the development package, so a deployment does not depend on it."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["kafka"]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name != "kafka":
            return None
        try:
            from devtools.localkafka.cli import kafka_cli
        except ModuleNotFoundError as exc:
            raise click.ClickException(
                f"leasekeeper dev kafka needs the development tools ({exc.name} is not "
                "installed here); run it from a source checkout (make venv)"
            ) from None
        return kafka_cli


@main.group(cls=_DevCommands)
def dev() -> None:
    """Development helpers (a local Kafka)."""


main.add_command(inspect)
main.add_command(dlq)
main.add_command(dashboard)
main.add_command(breaker)
main.add_command(ordering)
