"""``python -m benchmarks.enqueue_cost``: what the producer's flood diversion costs an
enqueue that is not a flood.

``--jobs`` jobs spread over ``--tenants`` tenants (no tenant near its burst) are
enqueued with ``enqueue_batch`` into a fresh queue, with the diversion off, then
on, ``--rounds`` times interleaved. Reported per round: jobs/s and the process's CPU
(user + system, librdkafka's threads included) per job; then the medians. Written
to ``enqueue_cost.json`` in the results directory.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.apps import JOB_TYPE
from benchmarks.config import BenchConfig
from benchmarks.context import REPO, SCHEMA_DIR, BenchContext, standalone
from producer import FloodPolicy, JobProducer, JobRequest, ensure_queue_topics
from schemas.codec import SchemaRegistry

DEFAULT_OUT = REPO / "benchmarks" / "results"
VARIANTS = (("off", FloodPolicy.off()), ("on", FloodPolicy()))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.enqueue_cost")
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per round [50000]")
    parser.add_argument("--tenants", type=int, default=1_000, help="tenants [1000]")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per variant [5]")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting one")
    parser.add_argument("--out", type=Path, help="results directory [benchmarks/results]")
    return parser.parse_args(argv)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _round(ctx: BenchContext, args: argparse.Namespace, policy: FloodPolicy) -> dict[str, float]:
    queue = f"enqueue{uuid.uuid4().hex[:6]}"
    ensure_queue_topics(ctx.settings, queue, partitions=ctx.config.partitions)
    registry = SchemaRegistry(extra_dirs=[SCHEMA_DIR])
    requests = [
        JobRequest(
            queue=queue,
            type=JOB_TYPE,
            payload={"n": n, "blob": "x" * 96},
            tenant_id=f"tenant-{n % args.tenants}",
        )
        for n in range(args.jobs)
    ]
    with JobProducer(ctx.settings, registry=registry, flood=policy) as producer:
        producer.enqueue_batch(requests[:100])  # warm: topics looked up, connections made
        started, cpu = time.perf_counter(), _cpu_s()
        producer.enqueue_batch(requests)
        wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    return {
        "jobs_per_s": round(args.jobs / wall),
        "cpu_us_per_job": round(cpu / args.jobs * 1e6, 1),
    }


def run(ctx: BenchContext, args: argparse.Namespace) -> dict[str, Any]:
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label, _ in VARIANTS}
    for n in range(args.rounds):
        for label, policy in VARIANTS:
            row = _round(ctx, args, policy)
            rounds[label].append(row)
            print(f"round {n} diversion {label}: {row['jobs_per_s']:,} jobs/s, "
                  f"{row['cpu_us_per_job']} us CPU per job")  # fmt: skip
    medians = {
        label: {
            key: statistics.median(r[key] for r in rows) for key in ("jobs_per_s", "cpu_us_per_job")
        }
        for label, rows in rounds.items()
    }
    return {"jobs": args.jobs, "tenants": args.tenants, "rounds": rounds, "medians": medians}


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    args = parse(argv)
    out_dir = args.out or DEFAULT_OUT
    with standalone(BenchConfig.full(), out_dir, pin=False, bootstrap=args.bootstrap) as ctx:
        result = run(ctx, args)
    (out_dir / "enqueue_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    for label, median in result["medians"].items():
        print(f"median, diversion {label}: {median['jobs_per_s']:,} jobs/s, "
              f"{median['cpu_us_per_job']} us CPU per job")  # fmt: skip


if __name__ == "__main__":
    main()
