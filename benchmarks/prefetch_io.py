"""``python -m benchmarks.prefetch_io``: our 10 ms I/O drain at several ``--prefetch``
values, interleaved, to choose the workers' default.

The same backlog as scenario 3 and 4's 10 ms load (``processes x io_concurrency``
slots, ``io_ms`` per job), drained by our system only, once per prefetch value per
round, in the order 1, 2, 4, 1, 2, 4, ... so that a busy neighbour on a shared
machine hits every value alike. Each row carries the load average before and after
its drain; the medians per value close the report. Written to
``prefetch_io.json`` in the results directory.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.config import BenchConfig
from benchmarks.context import REPO, BenchContext, standalone
from benchmarks.scenarios.drain import drain_ours

DEFAULT_OUT = REPO / "benchmarks" / "results"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.prefetch_io")
    parser.add_argument("--prefetch", default="1,2,4", help="values to compare [1,2,4]")
    parser.add_argument("--rounds", type=int, default=2, help="drains per value [2]")
    parser.add_argument("--quick", action="store_true", help="the quick mode's backlog")
    parser.add_argument("--jobs", type=int, help="override the backlog size")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting one")
    parser.add_argument("--out", type=Path, help="results directory [benchmarks/results(/quick)]")
    parser.add_argument("--no-pin", action="store_true", help="do not pin servers and clients")
    return parser.parse_args(argv)


def drain_at(ctx: BenchContext, queue: str, prefetch: int) -> dict[str, Any]:
    """One drain of the 10 ms backlog with ``--prefetch prefetch``, with the load
    average (1 min) around it: the machine may be shared."""
    config = ctx.config
    load_before = os.getloadavg()[0]
    outcome = drain_ours(
        ctx,
        workers=config.processes,
        concurrency=config.io_concurrency,
        app="io_app",
        jobs=config.io_jobs,
        queue=queue,
        variant=f"{config.io_ms} ms I/O, {config.processes} x {config.io_concurrency}, "
        f"prefetch {prefetch}",
        worker_args=("--prefetch", str(prefetch)),
    )
    row = outcome.row()
    clients = sum(v for k, v in outcome.cpu_s.items() if k in ("leasekeeper", "workers"))
    row.update(
        prefetch=prefetch,
        client_cpu_ms_per_job=round(clients * 1000 / max(1, outcome.jobs), 4),
        load_before=round(load_before, 2),
        load_after=round(os.getloadavg()[0], 2),
    )
    return row


def medians(rows: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    by_value: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_value.setdefault(row["prefetch"], []).append(row)
    return {
        value: {
            "jobs_per_s": statistics.median(r["jobs_per_s"] for r in same),
            "client_cpu_ms_per_job": statistics.median(r["client_cpu_ms_per_job"] for r in same),
        }
        for value, same in by_value.items()
    }


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse(argv)
    values = [int(v) for v in args.prefetch.split(",")]
    config = BenchConfig.quick_mode() if args.quick else BenchConfig.full()
    if args.jobs:
        config = replace(config, io_jobs=args.jobs)
    out_dir = args.out or (DEFAULT_OUT / "quick" if config.quick else DEFAULT_OUT)
    rows: list[dict[str, Any]] = []
    with standalone(config, out_dir, pin=not args.no_pin, bootstrap=args.bootstrap) as ctx:
        queue = ctx.backlog(config.io_jobs, "io")
        for _ in range(args.rounds):
            rows.extend(drain_at(ctx, queue, value) for value in values)
    per_value = medians(rows)
    result = {"pinning": ctx.pinning.describe(), "rows": rows, "medians": per_value}
    (out_dir / "prefetch_io.json").write_text(json.dumps(result, indent=2) + "\n")
    for row in rows:
        print(
            f"prefetch {row['prefetch']}: {row['jobs_per_s']:,.0f} jobs/s, client CPU "
            f"{row['client_cpu_ms_per_job']:.3f} ms/job, load {row['load_before']}"
            f" -> {row['load_after']}"
        )
    for value, median in per_value.items():
        print(f"median, prefetch {value}: {median}")


if __name__ == "__main__":
    main()
