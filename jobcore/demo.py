"""``make run``: the whole system on one machine, stopped cleanly by Ctrl-C."""

from __future__ import annotations

import signal
import tempfile
import threading
from pathlib import Path

from jobcore.localkafka import LocalKafka, obtain


def main() -> None:
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="kafka-lease-queue-") as tmp:
        cluster = LocalKafka(distribution=obtain(), workdir=Path(tmp), brokers=1)
        try:
            bootstrap = cluster.start()
            print(f"Kafka {cluster.distribution.version} is up at {bootstrap} (Ctrl-C stops it)")
            stop.wait()
        finally:
            print("stopping Kafka ...")
            cluster.stop()


if __name__ == "__main__":
    main()
