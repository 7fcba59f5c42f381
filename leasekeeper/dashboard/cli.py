"""``leasekeeper dashboard``: serve the web dashboard until Ctrl-C or SIGTERM."""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import signal
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

import click

from jobcore.cli_env import (
    dashboard_token_option,
    environment,
    schema_path_option,
    topic_prefix_option,
)
from jobcore.cli_errors import log_level_option
from jobcore.cli_kafka import (
    bootstrap_option,
    connect_timeout_option,
    kafka_config_option,
    kafka_settings,
    require_kafka,
)
from jobcore.cli_registry import schema_registry_options, schemas_for
from leasekeeper.dashboard.access import AccessPolicy, listen_problem
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetReader, FleetState
from leasekeeper.dashboard.hosts import HostCheck
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.server import Dashboard, DashboardServer, url_of
from leasekeeper.dashboard.status_index import StatusIndex
from schemas.codec import EnvelopeCodec

__all__ = ["ENV_ALLOWED_HOSTS", "dashboard", "split_listen"]

ENV_ALLOWED_HOSTS = "DASHBOARD_ALLOWED_HOSTS"


def split_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8700`` for IPv6) into its parts; click error otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise click.BadParameter(
            f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8700)", param_hint="--listen"
        )
    return host.strip("[]"), int(port)


def _allowed_hosts(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[str, ...]:
    """Each ``--allowed-host`` (the variable's list is split on spaces or commas): a
    name or an IP address, bracketed or not, without a port."""
    hosts = []
    for value in (part.strip() for text in values for part in text.split(",")):
        if not value:
            continue
        bare = value.removeprefix("[").removesuffix("]")
        if bare.count(":") == 1 or (value.startswith("[") and not value.endswith("]")):
            raise click.BadParameter(
                f"{value!r} has a port: give the host alone (e.g. dash.example.com); "
                "any port is accepted",
                ctx=ctx,
                param=param,
            )
        hosts.append(bare)
    return tuple(hosts)


def _base_path(text: str) -> str:
    text = text.strip()
    if text and not text.startswith("/"):
        raise click.BadParameter(
            f"{text!r} must start with / (e.g. /ops/jobs)", param_hint="--base-path"
        )
    return text.rstrip("/")


@click.command()
@click.option("--listen", default="127.0.0.1:8700", show_default=True, help="HOST:PORT to serve on")
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@connect_timeout_option
@click.option("--base-path", default="", help="path prefix when served behind a proxy (/ops/jobs)")
@click.option("--read-only", is_flag=True, help="no write actions (cancel, replay), for anyone")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="RocksDB index of the status topics, kept across restarts [default: a new temp dir]",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="no credentials needed, even off loopback, even to act [else the token]",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar=ENV_ALLOWED_HOSTS,
    show_envvar=True,
    callback=_allowed_hosts,
    help="a host name visitors reach the dashboard by, besides localhost, 127.0.0.1, [::1] "
    "and the --listen host (repeatable): any other Host header is refused, against DNS "
    "rebinding",
)
@dashboard_token_option(
    "Visitors' token (bearer, basic-auth password or the dashboard_token cookie)."
)
@schema_path_option()
@schema_registry_options
@log_level_option()
def dashboard(
    listen: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    base_path: str,
    read_only: bool,
    state_dir: Path | None,
    insecure: bool,
    allowed_hosts: tuple[str, ...],
    dashboard_token: str | None,
    schema_paths: tuple[str, ...],
    schema_registry: str | None,
    schema_registry_config: Path | None,
    log_level: str,
) -> None:
    """Serve the web dashboard: queues, leasekeepers, dead letters (with replay), jobs.

    Listens on loopback by default. Visitors need DASHBOARD_TOKEN (bearer, basic-auth
    password or the dashboard_token cookie) except on loopback, where they may read;
    acting (replay) always needs it unless --insecure. Every action is logged. Requests
    naming another host than loopback, the --listen host or an --allowed-host are refused."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # A crash in native code (the Kafka client, RocksDB) leaves every thread's Python
    # stack on stderr instead of a bare exit by signal.
    with contextlib.suppress(OSError, ValueError):  # stderr is no file (a test's runner)
        faulthandler.enable()
    host, port = split_listen(listen)
    token = dashboard_token or None
    problem = listen_problem(host, token=token, insecure=insecure)
    if problem:
        raise click.ClickException(problem)
    env = environment()
    settings = kafka_settings("dashboard", bootstrap=bootstrap, kafka_config=kafka_config, env=env)
    require_kafka(settings, connect_timeout_s)
    registry = schemas_for(
        schema_paths,
        url=schema_registry,
        config=schema_registry_config,
        prefix=env.topic_prefix,
    )
    fleet = FleetState()
    index = StatusIndex(
        settings,
        env.topic_prefix,
        state_dir or Path(tempfile.mkdtemp(prefix="dashboard-status-")),
        live_queues=lambda: fleet.queues(round(time.time() * 1000)),
    )
    codec = EnvelopeCodec(registry)
    _serve(
        Dashboard(
            fleet=fleet,
            kafka=KafkaView(settings, env.topic_prefix),
            actions=Actions(kafka=settings, prefix=env.topic_prefix, codec=codec, index=index),
            policy=AccessPolicy(token=token, insecure=insecure, read_only=read_only),
            base=_base_path(base_path),
            hosts=HostCheck.of([host, *allowed_hosts]),
        ),
        host,
        port,
    )


def _serve(d: Dashboard, host: str, port: int) -> None:
    try:
        server = DashboardServer(d, host, port)
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --listen"
        ) from None
    reader = FleetReader(d.actions.kafka, d.actions.prefix, d.fleet, relays=d.relays)
    reader.start()
    if d.actions.index is not None:
        d.actions.index.start()
    server.start()
    click.echo(f"dashboard on {url_of(host, server.port, d.base)}", err=True)
    stopper = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopper.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stopper.wait(0.5):
        pass
    server.stop()
    reader.stop()
    if d.actions.index is not None:
        d.actions.index.stop()
    click.echo("dashboard stopped", err=True)
