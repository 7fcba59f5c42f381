"""``leasekeeper inspect`` and ``inspect job``: ask a running leasekeeper what it holds,
and the status topic how a job it no longer holds ended."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import click
import grpc
from click.core import ParameterSource

from jobcore.cli_env import (
    environment,
    from_environment,
    leasekeeper_client_options,
    topic_prefix_option,
)
from jobcore.cli_errors import Unreachable
from jobcore.cli_kafka import bootstrap_option, kafka_config_option
from jobcore.config import Environment, queues_with_sockets
from leasekeeper.views.finished import finished_view
from leasekeeper.views.inspect_view import (
    NOT_FOUND_STATES,
    fetch_snapshot,
    job_lines,
    render_snapshot,
)

_QUEUE_HELP = "the queue whose leasekeeper to ask, at its default socket"


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Where:
    """Which leasekeeper ``inspect`` asks: given on the group or on ``inspect job``."""

    target: str | None = None
    queue: str | None = None
    as_json: bool = False


@click.group(invoke_without_command=True)
@click.option("--queue", default=None, help=_QUEUE_HELP)
@leasekeeper_client_options
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--wide", is_flag=True, help="every retry-tier partition, not one row per tier")
@click.pass_context
def inspect(
    ctx: click.Context,
    queue: str | None,
    target: str | None,
    tls_ca: str | None,
    as_json: bool,
    wide: bool,
) -> None:
    """Partitions, commit gaps and leases in flight of a running leasekeeper.

    Exits 3 when no leasekeeper answers at the address."""
    # The flag only: LEASEKEEPER_TARGET reaches the address through environment().
    given = target if ctx.get_parameter_source("target") is ParameterSource.COMMANDLINE else None
    if ctx.invoked_subcommand is not None:
        ctx.obj = _Where(target=given, queue=queue, as_json=as_json)
        return
    snapshot = _fetch(_Where(target=given, queue=queue))
    if as_json:
        click.echo(json.dumps(snapshot, indent=2))
    else:
        render_snapshot(snapshot, wide=wide)


@inspect.command("job")
@click.argument("job_id")
@click.option("--queue", default=None, help=_QUEUE_HELP)
@leasekeeper_client_options
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.pass_context
def inspect_job(
    ctx: click.Context,
    job_id: str,
    queue: str | None,
    target: str | None,
    tls_ca: str | None,
    bootstrap: str | None,
    kafka_config: Path | None,
    as_json: bool,
) -> None:
    """Where JOB_ID (or a unique prefix of 8+ characters) is: ready, delayed, leased
    (to whom, which attempt), skipped as a duplicate, or cancelled; for a finished job
    (Kafka given) how it ended, from the queue's status topic (its last 1M records).

    Exits 1 when this leasekeeper knows no such job, or the prefix is ambiguous.
    """
    group = ctx.obj or _Where()
    given = target if ctx.get_parameter_source("target") is ParameterSource.COMMANDLINE else None
    where = _Where(target=given or group.target, queue=queue or group.queue)
    view = _fetch(where, job_id=job_id)
    if not view["member_knows"]:  # finished? the status topic knows
        snapshot_queue = _fetch(where).get("queue")
        view = finished_view(
            view,
            str(snapshot_queue or ""),
            environment(),
            bootstrap=None if from_environment("bootstrap") else bootstrap,
            kafka_config=None if from_environment("kafka_config") else kafka_config,
        )
    if as_json or group.as_json:
        click.echo(json.dumps(view, indent=2))
    else:
        for line in job_lines(view, time.time_ns() // 1_000_000):
            click.echo(line)
    if view["state"] in NOT_FOUND_STATES:
        ctx.exit(1)


def _fetch(where: _Where, job_id: str = "") -> dict[str, Any]:
    """The snapshot, or one line naming the address, where it came from and the fix."""
    env = environment()
    address = env.target(where.target, queue=where.queue)
    try:
        return fetch_snapshot(address, env.leasekeeper_token, job_id=job_id, tls_ca=_ca(env))
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise Unreachable(_no_leasekeeper(address, where, env)) from None
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        raise click.ClickException(f"the leasekeeper at {address} refused: {details}") from None


def _no_leasekeeper(address: str, where: _Where, env: Environment) -> str:
    if where.target:
        origin = "--target"
    elif env.leasekeeper_target_from_env:
        origin = "LEASEKEEPER_TARGET"
    elif where.queue:
        origin = f"the default socket of queue {where.queue}"
    elif len(running := queues_with_sockets()) > 1:
        origin = f"sockets of queues {', '.join(running)}: give --queue to pick one"
    else:
        origin = "the default socket; give --queue QUEUE to ask that queue's leasekeeper"
    return (
        f"no leasekeeper answers at {address} ({origin}); is `leasekeeper serve --queue "
        f"{where.queue or 'QUEUE'}` running? set --queue, --target or LEASEKEEPER_TARGET"
    )


def _ca(env: Environment) -> bytes | None:
    """The CA of a TLS leasekeeper (--tls-ca, LEASEKEEPER_TLS_CA)."""
    if env.leasekeeper_tls_ca is None:
        return None
    try:
        return Path(env.leasekeeper_tls_ca).read_bytes()
    except OSError as exc:
        raise click.ClickException(
            f"cannot read the TLS CA file (--tls-ca or LEASEKEEPER_TLS_CA): {exc}"
        ) from None
