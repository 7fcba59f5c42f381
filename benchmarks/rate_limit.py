"""Dispatch rate under a rate limit: how close to N/s a ``--rate-limit`` keeps a backlog.

Run against a broker (default ``KAFKA_BOOTSTRAP``)::

    python -m benchmarks.rate_limit --rate 100 --seconds 20

A backlog of ``rate * (seconds + 10)`` no-op jobs, one leasekeeper started with
``--rate-limit bench_noop=RATE/s`` and two worker processes of 16 slots each,
far more than the rate needs. The leasekeeper's own count of dispatches under
the limit (its ``inspect`` snapshot) is read once the first second's burst is
out, and again ``seconds`` later: the rate over that window, and over the whole
run from the first dispatch, are printed as one JSON line, with the jobs parked
in a delay tier because the window held its share of them.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks import procs
from benchmarks.apps import JOB_TYPE
from benchmarks.context import SCHEMA_DIR
from benchmarks.load import Preloader
from benchmarks.ours import OurSystem
from jobcore.kafka import KafkaSettings

PARTITIONS = 4


def limiter(system: OurSystem) -> dict[str, Any] | None:
    snap = system.snapshot()
    limits = (snap or {}).get("limits") or {}
    return next((v for v in limits.get("limiters", []) if v["key"] == JOB_TYPE), None)


def dispatched(system: OurSystem) -> int:
    view = limiter(system)
    return 0 if view is None else int(view["dispatched"])


def measure(settings: KafkaSettings, rate: float, seconds: float, workdir: Path) -> dict[str, Any]:
    queue = f"ratebench{uuid.uuid4().hex[:8]}"
    backlog = int(rate * (seconds + 10))
    loader = Preloader(settings, queue=queue, partitions=PARTITIONS, tenants=8,
                       payload_bytes=100, schema_dir=SCHEMA_DIR)  # fmt: skip
    loader.load(backlog)
    loader.close()
    system = OurSystem(settings=settings, queue=queue, workdir=workdir, partitions=PARTITIONS)
    try:
        system.start_leasekeeper("--rate-limit", f"{JOB_TYPE}={rate:g}/s")
        system.start_workers("noop_app", count=2, concurrency=16)
        procs.wait_until(lambda: dispatched(system) > 0, 60, "the first dispatch", step=0.01)
        first_at, first = time.monotonic(), dispatched(system)
        time.sleep(1.0)  # past the first second's burst
        start_at, start = time.monotonic(), dispatched(system)
        time.sleep(seconds)
        end_at, end = time.monotonic(), dispatched(system)
        view = limiter(system) or {}
    finally:
        system.stop()
    return {
        "limit_per_s": rate,
        "window_s": round(end_at - start_at, 2),
        "rate_per_s": round((end - start) / (end_at - start_at), 2),
        "rate_with_burst_per_s": round((end - first) / (end_at - first_at), 2),
        "dispatched": end,
        "parked": view.get("parked"),
        "backlog": backlog,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="the limit, jobs per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    args = parser.parse_args()
    if args.rate <= 0 or args.seconds <= 0:
        parser.error("--rate and --seconds must be > 0")
    settings = KafkaSettings(bootstrap=args.bootstrap, client_id="rate-limit-bench")
    with tempfile.TemporaryDirectory(prefix="ratebench-") as tmp:
        print(json.dumps(measure(settings, args.rate, args.seconds, Path(tmp))))


if __name__ == "__main__":
    main()
