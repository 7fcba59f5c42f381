"""``make run``: Kafka, a queue, a leasekeeper, two workers, the dashboard and a stream of
demo jobs.

Everything runs on this machine as the user would run it (the same CLIs), and
Ctrl-C stops it all cleanly: producer first, then workers (they finish or
release their jobs), then the leasekeeper (it commits), then Kafka.
"""

from __future__ import annotations

import itertools
import random
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from devtools.localkafka import LocalKafka, obtain
from jobcore.kafka import KafkaSettings
from leasekeeper.inspect_view import fetch_snapshot

QUEUE = "demo"
DASHBOARD = "127.0.0.1:8700"
TENANTS = ("acme", "globex", "initech", "umbrella")
BIN = Path(sys.executable).parent


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(BIN / args[0]), *args[1:]],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us; we stop children in order
        )


def _stop(process: subprocess.Popen[bytes], grace: float = 30) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _produce(settings: KafkaSettings, stop: threading.Event) -> None:
    from producer import JobProducer

    with JobProducer(settings) as producer:
        for n in itertools.count():
            if stop.wait(0.05):
                return
            tenant = random.choice(TENANTS)
            if n % 3:
                payload = {
                    "order_id": n,
                    "email": f"{tenant}-{n}@example.com",
                    "amount_cents": 1999,
                }
                producer.enqueue(QUEUE, "send_receipt", payload, tenant_id=tenant)
            else:
                payload = {"image_url": f"s3://uploads/{n}.png", "width": 640, "height": 480}
                producer.enqueue(QUEUE, "resize_image", payload, tenant_id=tenant)


def _table(target: str) -> Table:
    table = Table(title=f"queue {QUEUE}: Ctrl-C stops everything")
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


def main() -> None:
    console = Console()
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="kafka-lease-queue-") as tmp:
        work = Path(tmp)
        cluster = LocalKafka(distribution=obtain(), workdir=work / "kafka", brokers=1)
        children: list[subprocess.Popen[bytes]] = []
        try:
            bootstrap = cluster.start()
            console.print(f"Kafka {cluster.distribution.version} is up at {bootstrap}")
            subprocess.run(
                [str(BIN / "producer"), "create-queue", QUEUE, "--partitions", "4",
                 "--bootstrap", bootstrap],
                check=True,
            )  # fmt: skip
            target = f"unix:{work / 'leasekeeper.sock'}"
            children.append(_spawn(
                ["leasekeeper", "serve", "--queue", QUEUE, "--bootstrap", bootstrap,
                 "--state-dir", str(work / "state"), "--listen", target],
                work / "leasekeeper.log",
            ))  # fmt: skip
            for i in range(2):
                children.append(_spawn(
                    ["workers", "run", "examples.demo_app:app", "--target", target,
                     "--concurrency", "16"],
                    work / f"worker-{i}.log",
                ))  # fmt: skip
            children.append(_spawn(
                ["leasekeeper", "dashboard", "--listen", DASHBOARD, "--bootstrap", bootstrap],
                work / "dashboard.log",
            ))  # fmt: skip
            console.print(f"dashboard at http://{DASHBOARD}/ (log in {work / 'dashboard.log'})")
            feeder = threading.Thread(
                target=_produce, args=(KafkaSettings(bootstrap=bootstrap), stop)
            )
            feeder.start()
            console.print(
                f"logs in {work}; enqueueing receipts and resizes for {len(TENANTS)} tenants"
            )
            with Live(_table(target), console=console, refresh_per_second=2) as live:
                while not stop.wait(0.5):
                    live.update(_table(target))
            feeder.join()
        finally:
            console.print("stopping workers, leasekeeper and Kafka ...")
            for child in reversed(children):
                _stop(child)
            cluster.stop()


if __name__ == "__main__":
    main()
