"""``python -m devtools.localkafka`` / ``leasekeeper dev kafka``: fetch, start, stop,
status, reset.

``start`` leaves the brokers running in their own session and records their
pids and address in a state file, so ``stop`` and ``status`` can find them from
another shell. ``stop`` keeps the data and the address, so the next ``start``
brings the same topics and jobs back where every client looks for them; only
``reset`` deletes them. Settings come from flags or their environment variables
(``--state-dir`` or ``LOCAL_KAFKA_DIR``, ``--kafka-version`` or ``KAFKA_VERSION``,
``--kafka-home`` or ``KAFKA_HOME``), read by click.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import click

from devtools.dev_cluster import ClusterRecord, pid_alive, read_record, state_dir, state_file
from devtools.localkafka.cluster import BrokerNode, LocalKafka, free_port
from devtools.localkafka.distribution import DEFAULT_KAFKA_VERSION, KafkaUnavailable, obtain
from devtools.localkafka.layout import (
    node_paths,
    port_taken,
    recorded_cluster_id,
    recorded_nodes,
)
from jobcore.config import ENV_LOCAL_KAFKA_DIR
from jobcore.durations import DURATION, shown
from jobcore.kafka import wait_for_brokers


class StartRefused(click.ClickException):
    """The cluster cannot start as asked (a port taken, another broker count): exit 2,
    with the flag that fixes it."""

    exit_code = 2


@click.group(name="kafka")
@click.option(
    "--state-dir",
    envvar=ENV_LOCAL_KAFKA_DIR,
    show_envvar=True,
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the cluster keeps its data and state file [default: the user's cache].",
)
@click.pass_context
def kafka_cli(ctx: click.Context, state_dir: Path | None) -> None:
    """Run a local Apache Kafka (KRaft) for development and tests."""
    ctx.obj = state_dir


_VERSION = click.option(
    "--kafka-version",
    envvar="KAFKA_VERSION",
    show_envvar=True,
    default=DEFAULT_KAFKA_VERSION,
    show_default=True,
    help="Apache Kafka version to fetch and run.",
)
_HOME = click.option(
    "--kafka-home",
    envvar="KAFKA_HOME",
    show_envvar=True,
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="An unpacked Kafka to run instead of fetching one (its libs/ directory is used).",
)


@kafka_cli.command()
@_VERSION
@_HOME
def fetch(kafka_version: str, kafka_home: Path | None) -> None:
    """Download the broker's jars once (cached); print where they are."""
    started = time.monotonic()
    dist = obtain(kafka_version, home=kafka_home)
    click.echo(
        f"kafka {dist.version} from {dist.source}: {dist.libs} ({time.monotonic() - started:.1f}s)"
    )


@kafka_cli.command()
@click.option(
    "--brokers",
    type=click.IntRange(min=1),
    default=None,
    help="1, or 3 for a failover cluster [default: as many as the state dir holds, else 1]",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="The (first) broker's port [default: the one it had, else a free one].",
)
@click.option("--heap", default="512m", show_default=True)
@_VERSION
@_HOME
@click.pass_obj
def start(
    given: Path | None,
    brokers: int | None,
    port: int | None,
    heap: str,
    kafka_version: str,
    kafka_home: Path | None,
) -> None:
    """Start brokers in the background and print the bootstrap address. A stopped
    cluster starts again with its topics and jobs, on its old port."""
    record = read_record(state_file(given))
    if record is not None and record.running():
        click.echo(record.bootstrap)
        return
    workdir = state_dir(given)
    nodes = _planned_nodes(workdir, brokers, port)
    started = time.monotonic()
    cluster = LocalKafka(
        distribution=obtain(kafka_version, home=kafka_home),
        workdir=workdir,
        brokers=len(nodes),
        heap=heap,
        detach=True,
        nodes=nodes,
        cluster_id=recorded_cluster_id(nodes),
    )
    try:
        bootstrap = cluster.start()
    except KafkaUnavailable as exc:
        cluster.stop(grace=5)
        raise click.ClickException(str(exc)) from exc
    pids = tuple(n.process.pid for n in cluster.nodes if n.process is not None)
    ClusterRecord(bootstrap=bootstrap, pids=pids).write(state_file(given))
    click.echo(f"started in {time.monotonic() - started:.1f}s", err=True)
    click.echo(bootstrap)


def _planned_nodes(workdir: Path, brokers: int | None, port: int | None) -> list[BrokerNode]:
    """The nodes to start: those ``workdir`` holds (their ports unless ``port``), else
    new ones. Refuses a taken client port; a taken controller port, which no client
    knows, is replaced."""
    nodes = recorded_nodes(workdir)
    if nodes and brokers is not None and brokers != len(nodes):
        raise StartRefused(
            f"{workdir} holds a {len(nodes)}-broker cluster: start it with "
            f"--brokers {len(nodes)}, or wipe it first with `dev kafka reset`"
        )
    if not nodes:
        nodes = [
            BrokerNode(
                node_id=i + 1,
                port=free_port() if port is None else 0,
                controller_port=free_port(),
                directory=workdir / f"node-{i + 1}",
            )
            for i in range(brokers or 1)
        ]
    for index, node in enumerate(nodes):
        node.port = node.port if port is None else port + index
        if port_taken(node.port):
            raise StartRefused(
                f"port {node.port} (the local Kafka's address 127.0.0.1:{node.port}) is "
                "taken: stop what listens there, or start with --port to choose another"
            )
        if port_taken(node.controller_port):
            node.controller_port = free_port()
    return nodes


_GRACE = click.option(
    "--grace",
    type=DURATION,
    default=shown(15.0),
    show_default=True,
    help="How long before SIGKILL (15s, 1m).",
)


@kafka_cli.command()
@_GRACE
@click.pass_obj
def stop(given: Path | None, grace: float) -> None:
    """Stop the brokers started by ``start`` (SIGTERM, then SIGKILL). Their topics and
    jobs stay: ``start`` brings them back at the same address; ``reset`` wipes them."""
    record = read_record(state_file(given))
    if record is None or not record.pids:
        click.echo("not running")
        return
    _stop(record.pids, grace)
    ClusterRecord(bootstrap=record.bootstrap, pids=()).write(state_file(given))
    click.echo("stopped")


def _stop(pids: tuple[int, ...], grace: float) -> None:
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@kafka_cli.command()
@click.pass_obj
def status(given: Path | None) -> None:
    """Print the bootstrap address if the brokers answer; exit 1 otherwise."""
    record = read_record(state_file(given))
    if record is None:
        click.echo("not running")
        raise SystemExit(1)
    if not record.running():
        click.echo(f"stopped; `dev kafka start` starts it again at {record.bootstrap}")
        raise SystemExit(1)
    if wait_for_brokers(record.bootstrap, len(record.pids), timeout=5):
        click.echo(record.bootstrap)
        return
    click.echo(f"not answering at {record.bootstrap}")
    raise SystemExit(1)


@kafka_cli.command()
@click.option("--yes", is_flag=True, help="Wipe without asking.")
@_GRACE
@click.pass_obj
def reset(given: Path | None, yes: bool, grace: float) -> None:
    """Stop the brokers and delete every topic, job and offset they hold; the next
    ``start`` begins empty, on a new port. Asks first, unless ``--yes``."""
    workdir = state_dir(given)
    found = node_paths(workdir)
    if not found:
        click.echo(f"nothing to reset in {workdir}")
        return
    if not yes:
        click.confirm(f"Delete every topic and job of the local Kafka in {workdir}?", abort=True)
    record = read_record(state_file(given))
    if record is not None:
        _stop(record.pids, grace)
    for path in found:
        shutil.rmtree(path)
    state_file(given).unlink(missing_ok=True)
    click.echo(f"wiped {workdir}")
