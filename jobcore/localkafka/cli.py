"""``python -m jobcore.localkafka`` / ``leasekeeper dev kafka``: fetch, start, stop, status.

``start`` leaves the brokers running in their own session and records their
pids and address in a state file, so ``stop`` and ``status`` can find them from
another shell.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import click

from jobcore.config import dev_kafka_state_file
from jobcore.kafka import wait_for_brokers
from jobcore.localkafka.cluster import LocalKafka
from jobcore.localkafka.distribution import KafkaUnavailable, cache_root, obtain


def state_dir() -> Path:
    return Path(os.environ.get("LOCAL_KAFKA_DIR", str(cache_root() / "dev-cluster")))


def _state_file() -> Path:
    """Where other commands look for the address when KAFKA_BOOTSTRAP is unset."""
    return dev_kafka_state_file()


def _read_state() -> dict[str, object] | None:
    path = _state_file()
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
def kafka_cli() -> None:
    """Run a local Apache Kafka (KRaft) for development and tests."""


@kafka_cli.command()
def fetch() -> None:
    """Download the broker's jars once (cached); print where they are."""
    started = time.monotonic()
    dist = obtain()
    click.echo(
        f"kafka {dist.version} from {dist.source}: {dist.libs} ({time.monotonic() - started:.1f}s)"
    )


@kafka_cli.command()
@click.option("--brokers", default=1, show_default=True, help="1, or 3 for a failover cluster")
@click.option("--heap", default="512m", show_default=True)
def start(brokers: int, heap: str) -> None:
    """Start brokers in the background and print the bootstrap address."""
    state = _read_state()
    if state and all(_pid_alive(int(p)) for p in state["pids"]):  # type: ignore[attr-defined]
        click.echo(str(state["bootstrap"]))
        return
    workdir = state_dir()
    if workdir.exists():
        import shutil

        shutil.rmtree(workdir)
    started = time.monotonic()
    cluster = LocalKafka(
        distribution=obtain(), workdir=workdir, brokers=brokers, heap=heap, detach=True
    )
    try:
        bootstrap = cluster.start()
    except KafkaUnavailable as exc:
        cluster.stop(grace=5)
        raise click.ClickException(str(exc)) from exc
    pids = [n.process.pid for n in cluster.nodes if n.process is not None]
    _state_file().write_text(json.dumps({"bootstrap": bootstrap, "pids": pids}))
    click.echo(f"started in {time.monotonic() - started:.1f}s", err=True)
    click.echo(bootstrap)


@kafka_cli.command()
@click.option("--grace", default=15.0, show_default=True, help="seconds before SIGKILL")
def stop(grace: float) -> None:
    """Stop the brokers started by ``start`` (SIGTERM, then SIGKILL)."""
    state = _read_state()
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
    _state_file().unlink(missing_ok=True)
    click.echo("stopped")


@kafka_cli.command()
def status() -> None:
    """Print the bootstrap address if the brokers answer; exit 1 otherwise."""
    state = _read_state()
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
