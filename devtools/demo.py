"""``make run``: Kafka, a queue, a leasekeeper, two workers, a cron scheduler, the
dashboard and a stream of demo jobs.

Everything runs on this machine as the user would run it (the same CLIs), and
Ctrl-C stops it all cleanly: producer first, then workers (they finish or
release their jobs), then the leasekeeper (it commits), then Kafka. Every child
runs in a session of its own, so the terminal's Ctrl-C reaches this process
alone: were Kafka to get it too, it would stop first, and the leasekeeper could
neither commit nor write its last status records.

``--bootstrap`` uses a running Kafka instead (left running), ``--queue`` names the
queue and ``--workdir`` keeps the logs; the acceptance tests use all three.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from devtools.demo_feed import TENANTS, cron_config, produce
from devtools.localkafka import LocalKafka, free_port, obtain
from jobcore.kafka import KafkaSettings
from leasekeeper.views.inspect_view import fetch_snapshot

DASHBOARD_HOST = "127.0.0.1"
DASHBOARD_PORT = 8700
BIN = Path(sys.executable).parent
# How long a child may take to stop after SIGTERM before it is killed (and said so).
GRACE_S = 30.0


def _spawn(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(BIN / args[0]), *args[1:]],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # Ctrl-C reaches us; we stop children in order
        )


def _ended(name: str, process: subprocess.Popen[bytes]) -> str:
    """Await ``process`` (SIGTERM sent), killing it after ``GRACE_S``; says which."""
    try:
        code = process.wait(GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return f"{name} killed after {GRACE_S:.0f}s"
    return f"{name} exited with {code}"


def _terminate(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)


def dashboard_port(host: str = DASHBOARD_HOST, preferred: int = DASHBOARD_PORT) -> int:
    """``preferred`` when nothing listens there, else a free port."""
    with socket.socket() as probe:
        try:
            probe.bind((host, preferred))
        except OSError:
            return free_port()
    return preferred


def _table(queue: str, target: str) -> Table:
    table = Table(title=f"queue {queue}: Ctrl-C stops everything")
    try:
        snapshot = fetch_snapshot(target, None, timeout=2)
    except Exception as exc:
        table.add_column("status")
        table.add_row(f"leasekeeper not answering yet ({type(exc).__name__})")
        return table
    counters = snapshot["counters"]
    for column in ("acked", "retried", "dead", "ready", "in flight", "stale rejected"):
        table.add_column(column, justify="right")
    in_flight = sum(len(p["leases"]) for p in snapshot["partitions"])
    table.add_row(
        str(counters["acked"]),
        str(counters["retried"]),
        str(counters["dead"]),
        str(snapshot["ready"]),
        str(in_flight),
        str(counters["stale_rejected"]),
    )
    return table


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devtools.demo", description=__doc__)
    parser.add_argument("--bootstrap", help="use this running Kafka (not stopped) [own Kafka]")
    parser.add_argument("--queue", default="demo", help="the queue's name [demo]")
    parser.add_argument("--workdir", type=Path, help="keep logs (and Kafka's data) here")
    return parser.parse_args(argv)


class Demo:
    """The children in their stop order, each stopped once its predecessors are gone."""

    def __init__(self, console: Console, work: Path, queue: str) -> None:
        self.console = console
        self.work = work
        self.queue = queue
        self.stop = threading.Event()
        self.enqueued = 0
        self.feeder: threading.Thread | None = None
        self.cron: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.leasekeeper: subprocess.Popen[bytes] | None = None
        self.dashboard: subprocess.Popen[bytes] | None = None

    def start(self, bootstrap: str) -> None:
        q, work = self.queue, self.work
        subprocess.run(
            [str(BIN / "producer"), "create-queue", q, "--partitions", "4",
             "--bootstrap", bootstrap],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        target = f"unix:{work / 'leasekeeper.sock'}"
        self.leasekeeper = _spawn(
            ["leasekeeper", "serve", "--queue", q, "--bootstrap", bootstrap,
             "--state-dir", str(work / "state"), "--listen", target],
            work / "leasekeeper.log",
        )  # fmt: skip
        app = ["workers", "run", "examples.demo_app:app", "--target", target, "--concurrency", "16"]
        self.workers = [_spawn(app, work / f"worker-{i}.log") for i in range(2)]
        config = cron_config(q, work / "cron.toml")
        self.cron = _spawn(
            ["producer", "cron", "run", "--config", str(config), "--bootstrap", bootstrap,
             "--group", q],
            work / "cron.log",
        )  # fmt: skip
        self._start_dashboard(bootstrap)
        self.feeder = threading.Thread(
            target=self._produce, args=(KafkaSettings(bootstrap=bootstrap),), daemon=True
        )
        self.feeder.start()
        self.console.print(
            f"logs in {work}; enqueueing receipts and resizes for {len(TENANTS)} tenants, "
            "a few dead letters and delayed jobs, and a cron entry every 30s"
        )
        with Live(_table(q, target), console=self.console, refresh_per_second=2) as live:
            while not self.stop.wait(0.5):
                live.update(_table(q, target))

    def _produce(self, settings: KafkaSettings) -> None:
        self.enqueued = produce(settings, self.queue, self.stop)

    def _start_dashboard(self, bootstrap: str) -> None:
        port = dashboard_port()
        token = secrets.token_urlsafe(24)
        env = {**os.environ, "DASHBOARD_TOKEN": token}
        self.dashboard = _spawn(
            ["leasekeeper", "dashboard", "--listen", f"{DASHBOARD_HOST}:{port}",
             "--bootstrap", bootstrap],
            self.work / "dashboard.log",
            env,
        )  # fmt: skip
        taken = "" if port == DASHBOARD_PORT else f" ({DASHBOARD_PORT} is taken)"
        self.console.print(
            f"dashboard at http://{DASHBOARD_HOST}:{port}/{taken}; open this link once to "
            f"act from it (it sets the cookie): http://{DASHBOARD_HOST}:{port}/login?token={token}",
            soft_wrap=True,
        )

    def shut_down(self) -> None:
        """Producer and cron scheduler, then workers, then the leasekeeper, each awaited."""
        self.stop.set()
        say = self.console.print
        if self.feeder is not None:
            self.feeder.join()
            say(f"stopped: producer ({self.enqueued} jobs enqueued)")
        if self.cron is not None:
            _terminate(self.cron)
            say(f"stopped: {_ended('cron scheduler', self.cron)}")
        _terminate(*self.workers)
        if self.dashboard is not None:
            _terminate(self.dashboard)  # along with the workers: it holds no job
        for i, worker in enumerate(self.workers):
            say(f"stopped: {_ended(f'worker {i}', worker)}")
        if self.leasekeeper is not None:
            _terminate(self.leasekeeper)
            say(f"stopped: {_ended('leasekeeper', self.leasekeeper)}")
        if self.dashboard is not None:
            say(f"stopped: {_ended('dashboard', self.dashboard)}")


def main(argv: list[str] | None = None) -> None:
    options = _options(argv)
    console = Console()
    with ExitStack() as stack:
        if options.workdir is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="jobs-demo-")))
        else:
            work = options.workdir
            work.mkdir(parents=True, exist_ok=True)
        demo = Demo(console, work, options.queue)
        signal.signal(signal.SIGINT, lambda *_: demo.stop.set())
        signal.signal(signal.SIGTERM, lambda *_: demo.stop.set())
        cluster = None
        if options.bootstrap is None:
            # detach: a session of its own, out of reach of the terminal's Ctrl-C.
            cluster = LocalKafka(
                distribution=obtain(), workdir=work / "kafka", brokers=1, detach=True
            )
        try:
            bootstrap = options.bootstrap
            if cluster is not None:
                bootstrap = cluster.start()
                console.print(f"Kafka {cluster.distribution.version} is up at {bootstrap}")
            if not demo.stop.is_set():  # Ctrl-C while Kafka started
                demo.start(bootstrap)
        finally:
            console.print("stopping in order: producer, workers, leasekeeper, Kafka ...")
            demo.shut_down()
            if cluster is not None:
                cluster.stop()
                console.print("stopped: Kafka")


if __name__ == "__main__":
    main()
