"""``python -m devtools.localkafka`` / ``leasekeeper dev kafka``: fetch, start, stop, status.

``start`` leaves the brokers running in their own session and records their
pids and address in a state file, so ``stop`` and ``status`` can find them from
another shell. Settings come from flags or their environment variables
(``--state-dir`` or ``LOCAL_KAFKA_DIR``, ``--kafka-version`` or ``KAFKA_VERSION``,
``--kafka-home`` or ``KAFKA_HOME``), read by click.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import click

from devtools.localkafka.cluster import LocalKafka
from devtools.localkafka.distribution import (
    DEFAULT_KAFKA_VERSION,
    KafkaUnavailable,
    cache_root,
    obtain,
)
from jobcore.config import ENV_LOCAL_KAFKA_DIR
from jobcore.durations import DURATION, shown
from jobcore.kafka import wait_for_brokers


def state_dir(given: Path | None = None) -> Path:
    """The cluster's directory: ``--state-dir`` / ``LOCAL_KAFKA_DIR``, else the cache's."""
    return given if given is not None else cache_root() / "dev-cluster"


def _state_file(given: Path | None = None) -> Path:
    """Where other commands look for the address when KAFKA_BOOTSTRAP is unset: they
    read ``LOCAL_KAFKA_DIR`` (:func:`jobcore.config.dev_kafka_state_file`), so a
    ``--state-dir`` flag without the variable is found by these commands only."""
    return state_dir(given) / "state.json"


def _read_state(given: Path | None) -> dict[str, object] | None:
    path = _state_file(given)
    if not path.exists():
        return None
    data: dict[str, object] = json.loads(path.read_text())
    return data


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
@click.option("--brokers", default=1, show_default=True, help="1, or 3 for a failover cluster")
@click.option("--heap", default="512m", show_default=True)
@_VERSION
@_HOME
@click.pass_obj
def start(
    given: Path | None, brokers: int, heap: str, kafka_version: str, kafka_home: Path | None
) -> None:
    """Start brokers in the background and print the bootstrap address."""
    state = _read_state(given)
    if state and all(_pid_alive(int(p)) for p in state["pids"]):  # type: ignore[attr-defined]
        click.echo(str(state["bootstrap"]))
        return
    workdir = state_dir(given)
    if workdir.exists():
        import shutil

        shutil.rmtree(workdir)
    started = time.monotonic()
    cluster = LocalKafka(
        distribution=obtain(kafka_version, home=kafka_home),
        workdir=workdir,
        brokers=brokers,
        heap=heap,
        detach=True,
    )
    try:
        bootstrap = cluster.start()
    except KafkaUnavailable as exc:
        cluster.stop(grace=5)
        raise click.ClickException(str(exc)) from exc
    pids = [n.process.pid for n in cluster.nodes if n.process is not None]
    _state_file(given).write_text(json.dumps({"bootstrap": bootstrap, "pids": pids}))
    click.echo(f"started in {time.monotonic() - started:.1f}s", err=True)
    click.echo(bootstrap)


@kafka_cli.command()
@click.option(
    "--grace",
    type=DURATION,
    default=shown(15.0),
    show_default=True,
    help="How long before SIGKILL (15s, 1m).",
)
@click.pass_obj
def stop(given: Path | None, grace: float) -> None:
    """Stop the brokers started by ``start`` (SIGTERM, then SIGKILL)."""
    state = _read_state(given)
    if not state:
        click.echo("not running")
        return
    pids = [int(p) for p in state["pids"]]  # type: ignore[attr-defined]
    for pid in pids:
        if _pid_alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    _state_file(given).unlink(missing_ok=True)
    click.echo("stopped")


@kafka_cli.command()
@click.pass_obj
def status(given: Path | None) -> None:
    """Print the bootstrap address if the brokers answer; exit 1 otherwise."""
    state = _read_state(given)
    if not state:
        click.echo("not running")
        raise SystemExit(1)
    bootstrap = str(state["bootstrap"])
    pids = [int(p) for p in state["pids"]]  # type: ignore[attr-defined]
    if wait_for_brokers(bootstrap, len(pids), timeout=5):
        click.echo(bootstrap)
        return
    click.echo(f"not answering at {bootstrap}")
    raise SystemExit(1)
