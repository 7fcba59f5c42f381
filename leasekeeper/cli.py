"""``leasekeeper`` command line: serve, inspect, dev kafka."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from pathlib import Path
from types import FrameType

import click

from jobcore.cli_kafka import (
    BOOTSTRAP_HELP,
    KafkaSetupFailed,
    kafka_config_option,
    kafka_failure,
    kafka_settings,
)
from jobcore.config import Environment
from jobcore.delay_tiers import DEFAULT_TIERS, DelayTiers
from jobcore.kafka import KafkaException
from jobcore.localkafka.cli import kafka_cli
from leasekeeper.consumer_loop import LoopConfig
from leasekeeper.dlq.cli import dlq
from leasekeeper.engine import EngineConfig
from leasekeeper.finished import finished_view
from leasekeeper.inspect_view import NOT_FOUND_STATES, fetch_snapshot, job_lines, render_snapshot
from leasekeeper.listen import ListenError, parse_socket_mode, preflight
from leasekeeper.retry_policy import DEFAULT_PERMANENT_ERRORS, Jitter, RetryPolicies, RetryPolicy
from leasekeeper.service import LeaseKeeperService, ServeConfig


@click.group()
def main() -> None:
    """The lease-tracking sidecar of the job queue."""


@main.command()
@click.option("--queue", required=True, help="the queue to serve (topic jobs.QUEUE)")
@click.option("--bootstrap", default=None, help=BOOTSTRAP_HELP)
@kafka_config_option
@click.option("--state-dir", type=click.Path(path_type=Path), required=True, help="RocksDB dir")
@click.option("--listen", default=None, help="unix:PATH or HOST:PORT [env LEASEKEEPER_TARGET]")
@click.option("--lease", "lease_s", default=30.0, show_default=True, help="lease length (s)")
@click.option("--window-records", default=10_000, show_default=True)
@click.option("--window-bytes", default=64 * 1024 * 1024, show_default=True)
@click.option("--group-id", default=None, help="consumer group (default leasekeeper.jobs.QUEUE)")
@click.option("--schema-path", multiple=True, help="extra directory of job payload schemas")
@click.option(
    "--instance-id",
    default=None,
    help="static group membership: restarting with the same id takes the partitions back at once",
)
@click.option("--session-timeout-ms", default=10_000, show_default=True)
@click.option(
    "--lease-for",
    multiple=True,
    metavar="TYPE=SECONDS",
    help="lease length for one job type (repeatable)",
)
@click.option(
    "--drain-grace",
    default=10.0,
    show_default=True,
    help="seconds moving or stopping partitions wait for jobs in flight",
)
@click.option("--metrics-port", type=int, default=None, help="serve Prometheus /metrics here")
@click.option(
    "--retry-tiers",
    default=",".join(DEFAULT_TIERS),
    show_default=True,
    help="delay tiers (topics jobs.QUEUE.retry.<tier>)",
)
@click.option(
    "--jitter",
    type=click.Choice([j.value for j in Jitter]),
    default=Jitter.FULL.value,
    show_default=True,
)
@click.option("--retry-base", default=1.0, show_default=True, help="backoff base (s)")
@click.option("--retry-cap", default=3600.0, show_default=True, help="backoff cap (s)")
@click.option(
    "--retry-budget",
    default=0.10,
    show_default=True,
    help="share of recent throughput retries may use",
)
@click.option(
    "--retry-budget-floor",
    default=60,
    show_default=True,
    help="retries always allowed per 60 s window, however quiet the queue",
)
@click.option(
    "--dedupe-window",
    default=86_400.0,
    show_default=True,
    help="seconds a dedupe key blocks later jobs with the same key (from the first)",
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
    default=600.0,
    show_default=True,
    help="seconds a job no connected worker runs waits before it fails as UnknownJobType",
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
    help="listen on loopback TCP without LEASEKEEPER_TOKEN (any local user can connect)",
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
@click.option("--log-level", default="INFO", show_default=True)
def serve(
    queue: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    state_dir: Path,
    listen: str | None,
    lease_s: float,
    window_records: int,
    window_bytes: int,
    group_id: str | None,
    schema_path: tuple[str, ...],
    instance_id: str | None,
    session_timeout_ms: int,
    lease_for: tuple[str, ...],
    drain_grace: float,
    metrics_port: int | None,
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
    socket_mode: str,
    insecure: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    log_level: str,
) -> None:
    """Consume QUEUE and lease its jobs to workers until SIGTERM or Ctrl-C.

    Waits for Kafka while it is unreachable (inspect answers meanwhile). Exits 2
    on a setup mistake (credentials, config, a missing queue), 1 when the Kafka
    loop fails, so a supervisor restarts it."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    env = Environment.from_env()
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
        listen=listen or env.leasekeeper_target,
        prefix=env.topic_prefix,
        token=env.leasekeeper_token,
        group_id=group_id,
        engine=EngineConfig(
            lease_s=lease_s,
            lease_s_by_type=_leases_by_type(lease_for),
            window_records=window_records,
            window_bytes=window_bytes,
            unknown_type_grace_s=unknown_type_grace,
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
        schema_dirs=schema_path + env.schema_path,
        instance_id=instance_id,
        session_timeout_ms=session_timeout_ms,
        reset_state=reset_state,
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
    stopper = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopper.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _start(service)
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
        job_type, _, seconds = pair.partition("=")
        try:
            leases[job_type] = float(seconds)
        except ValueError:
            raise click.BadParameter(
                f"expected TYPE=SECONDS, got {pair!r}", param_hint="--lease-for"
            ) from None
        if not job_type or leases[job_type] <= 0:
            raise click.BadParameter(
                f"expected TYPE=SECONDS > 0, got {pair!r}", param_hint="--lease-for"
            )
    return leases


_TARGET_HELP = "the leasekeeper's unix:PATH or HOST:PORT [env LEASEKEEPER_TARGET]"


@main.group(invoke_without_command=True)
@click.option("--target", default=None, help=_TARGET_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--wide", is_flag=True, help="every retry-tier partition, not one row per tier")
@click.pass_context
def inspect(ctx: click.Context, target: str | None, as_json: bool, wide: bool) -> None:
    """Partitions, commit gaps and leases in flight of a running leasekeeper."""
    if ctx.invoked_subcommand is not None:
        ctx.obj = (target, as_json)
        return
    env = Environment.from_env()
    snapshot = fetch_snapshot(
        target or env.leasekeeper_target, env.leasekeeper_token, tls_ca=_ca(env)
    )
    if as_json:
        click.echo(json.dumps(snapshot, indent=2))
    else:
        render_snapshot(snapshot, wide=wide)


@inspect.command("job")
@click.argument("job_id")
@click.option("--target", default=None, help=_TARGET_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.pass_context
def inspect_job(ctx: click.Context, job_id: str, target: str | None, as_json: bool) -> None:
    """Where JOB_ID (or a unique prefix of 8+ characters) is: ready, delayed, leased
    (to whom, which attempt), skipped as a duplicate, or cancelled; for a finished job
    (whole id, KAFKA_BOOTSTRAP set) how it ended, from the queue's status topic.

    Exits 1 when this leasekeeper knows no such job, or the prefix is ambiguous.
    """
    group_target, group_json = ctx.obj or (None, False)
    env = Environment.from_env()
    where = target or group_target or env.leasekeeper_target
    view = fetch_snapshot(where, env.leasekeeper_token, job_id=job_id, tls_ca=_ca(env))
    if not view["member_knows"]:  # finished? the status topic knows
        queue = fetch_snapshot(where, env.leasekeeper_token, tls_ca=_ca(env)).get("queue")
        view = finished_view(view, str(queue or ""), env)
    if as_json or group_json:
        click.echo(json.dumps(view, indent=2))
    else:
        for line in job_lines(view, time.time_ns() // 1_000_000):
            click.echo(line)
    if view["state"] in NOT_FOUND_STATES:
        ctx.exit(1)


def _ca(env: Environment) -> bytes | None:
    """The CA of a TLS leasekeeper, from LEASEKEEPER_TLS_CA."""
    if env.leasekeeper_tls_ca is None:
        return None
    try:
        return Path(env.leasekeeper_tls_ca).read_bytes()
    except OSError as exc:
        raise click.ClickException(f"cannot read LEASEKEEPER_TLS_CA: {exc}") from None


@main.group()
def dev() -> None:
    """Development helpers (a local Kafka)."""


dev.add_command(kafka_cli)
main.add_command(dlq)
