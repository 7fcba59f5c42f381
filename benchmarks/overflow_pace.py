"""``python -m benchmarks.overflow_pace``: how soon the tenants behind a flood start
when the overflow lane moves it aside, and how fast the lane copies.

One tenant enqueues ``--flood`` jobs into a fresh queue, then 30 other tenants
enqueue 300 jobs behind it (about one in six of them shares the flood's
partition). One leasekeeper with ``--overflow-share 0.5`` and ``--workers`` worker
processes of ``--slots`` slots start; each job waits ``--delay-ms`` after its start
(an I/O job: the case where the lane pays). Reported once a second: the lane's
copies so far (the overflow topic's end offsets) and the flood's and the others'
jobs started; at the end the others' start latency p50/p99/max and when the last
copy landed. ``--lane-off`` runs the same without the lane, for comparison.
Written to ``overflow_pace.json`` in the results directory.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from benchmarks.apps import ENV_DELAY_MS, JOB_TYPE, NOISY_GROUP_SCALE
from benchmarks.config import BenchConfig
from benchmarks.context import REPO, SCHEMA_DIR, BenchContext, standalone
from benchmarks.ours import OurSystem
from benchmarks.scenarios.latency import percentile
from benchmarks.scenarios.noisy import FLOOD, OTHERS, _groups
from jobcore.topics import QueueTopics
from producer import FloodPolicy, JobProducer, JobRequest, ensure_queue_topics
from schemas.codec import SchemaRegistry

DEFAULT_OUT = REPO / "benchmarks" / "results"
PARTITIONS = 6
OTHER_TENANTS, OTHER_JOBS = 30, 300
TIMEOUT_S = 300


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overflow_pace")
    parser.add_argument("--flood", type=int, default=100_000, help="flood jobs [100000]")
    parser.add_argument("--workers", type=int, default=4, help="worker processes [4]")
    parser.add_argument("--slots", type=int, default=32, help="slots per worker [32]")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="each job's wait [10]")
    parser.add_argument("--lane-off", action="store_true", help="without the overflow lane")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting one")
    parser.add_argument("--out", type=Path, help="results directory [benchmarks/results]")
    return parser.parse_args(argv)


def _request(queue: str, group: int, n: int, tenant: str) -> JobRequest:
    payload = {"n": group * NOISY_GROUP_SCALE + n}
    return JobRequest(queue=queue, type=JOB_TYPE, payload=payload, tenant_id=tenant)


def _enqueue(producer: JobProducer, queue: str, flood: int) -> None:
    producer.enqueue_batch(_request(queue, FLOOD, n, "big-backfill") for n in range(flood))
    producer.enqueue_batch(
        _request(queue, OTHERS, n, f"tenant-{n % OTHER_TENANTS}") for n in range(OTHER_JOBS)
    )
    producer.flush(60)


def _copies(probe: Consumer, topic: str) -> int:
    return sum(
        probe.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
        for p in range(PARTITIONS)
    )


def run(ctx: BenchContext, args: argparse.Namespace) -> dict[str, Any]:
    settings = ctx.settings
    queue = f"pace{uuid.uuid4().hex[:6]}"
    ensure_queue_topics(settings, queue, partitions=PARTITIONS)
    # The leasekeeper's lane is measured here: the flood goes to its ready partition
    # (the producer's own diversion would keep it out of there).
    producer = JobProducer(
        settings, registry=SchemaRegistry(extra_dirs=[SCHEMA_DIR]), flood=FloodPolicy.off()
    )
    _enqueue(producer, queue, args.flood)
    overflow = QueueTopics(queue=queue).overflow
    probe = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": f"probe-{queue}"})
    system = OurSystem(settings, queue, ctx.fresh_dir("overflow_pace"), partitions=PARTITIONS)
    timeline: list[dict[str, Any]] = []
    moved_at: float | None = None
    try:
        system.start_leasekeeper(*([] if args.lane_off else ["--overflow-share", "0.5"]))
        started = time.monotonic()
        system.start_workers("noisy_app", args.workers, args.slots,
                             {ENV_DELAY_MS: str(args.delay_ms)})  # fmt: skip
        while True:
            groups, copies = _groups(system.progress_dir), _copies(probe, overflow)
            at = round(time.monotonic() - started, 1)
            timeline.append({"s": at, "copies": copies, "flood_started": len(groups[FLOOD]),
                             "others_started": len(groups[OTHERS])})  # fmt: skip
            if moved_at is None and copies >= args.flood:
                moved_at = at
            if len(groups[OTHERS]) >= OTHER_JOBS:
                break
            if at > TIMEOUT_S:
                tail = system.log_tail("leasekeeper.log")
                raise RuntimeError(f"the others did not all start in {TIMEOUT_S} s: {tail}")
            time.sleep(1)
        others = _groups(system.progress_dir)[OTHERS]
    finally:
        system.stop()
        probe.close()
    return {
        "flood": args.flood,
        "workers": f"{args.workers} x {args.slots} slots, {args.delay_ms:g} ms jobs",
        "lane": "off" if args.lane_off else "on (--overflow-share 0.5)",
        "flood_moved_aside_s": moved_at,
        "others_p50_ms": percentile(others, 0.5),
        "others_p99_ms": percentile(others, 0.99),
        "others_max_ms": round(max(others), 1),
        "timeline": timeline,
    }


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse(argv)
    out_dir = args.out or DEFAULT_OUT
    with standalone(BenchConfig.full(), out_dir, pin=False, bootstrap=args.bootstrap) as ctx:
        result = run(ctx, args)
    (out_dir / "overflow_pace.json").write_text(json.dumps(result, indent=2) + "\n")
    for row in result["timeline"]:
        print(f"{row['s']:6.1f}s copies {row['copies']:>8,} flood started "
              f"{row['flood_started']:>8,} others started {row['others_started']}")  # fmt: skip
    print(
        f"lane {result['lane']}: flood moved aside in {result['flood_moved_aside_s']} s; "
        f"others p50 {result['others_p50_ms']:,.0f} ms, p99 {result['others_p99_ms']:,.0f} ms, "
        f"max {result['others_max_ms']:,.0f} ms"
    )


if __name__ == "__main__":
    main()
