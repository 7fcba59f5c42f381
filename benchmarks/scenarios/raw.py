"""Scenario 2: the raw Kafka limit, a bare produce and consume loop on the same broker.

The consumer reads the very backlog our leasekeeper drained (its own group),
so the ratio compares the same records on the same broker in the same run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

from benchmarks import procs
from benchmarks.context import REPO, BenchContext
from benchmarks.scenarios import ours_best, ratio, result
from jobcore.kafka import TopicSpec, create_topics
from jobcore.topics import QueueTopics


def _run_loop(ctx: BenchContext, args: list[str]) -> tuple[dict[str, Any], float]:
    """Run one rawloop process; returns its JSON line and the broker CPU it cost."""
    meter = procs.CpuMeter({"broker": ctx.broker_pids})
    meter.start()
    cmd = [sys.executable, "-m", "benchmarks.rawloop", *args, "--bootstrap", str(ctx.bootstrap)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900, check=False)
    broker = meter.stop()["broker"]
    if done.returncode != 0:
        raise RuntimeError(f"rawloop {args[0]} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), broker


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    queue = ctx.backlog(config.jobs)
    rows = []

    topic = f"raw-{uuid.uuid4().hex[:6]}"
    create_topics(ctx.settings, [TopicSpec(name=topic, partitions=config.partitions)])
    produced, broker_cpu = _run_loop(ctx, [
        "produce", "--topic", topic, "--count", str(config.jobs),
        "--source", QueueTopics(queue=queue).ready,
    ])  # fmt: skip
    produced_row = _row("produce (acks=all, idempotent)", produced, broker_cpu)
    rows.append(produced_row)

    consumed, broker_cpu = _run_loop(ctx, [
        "consume", "--topic", QueueTopics(queue=queue).ready, "--count", str(config.jobs),
        "--group", f"raw-{uuid.uuid4().hex[:6]}",
    ])  # fmt: skip
    consumed_row = _row("consume, commit every 1,000", consumed, broker_cpu)
    rows.append(consumed_row)

    ours = ours_best(ctx)
    enqueue = ctx.enqueue_rates[0] if ctx.enqueue_rates else None
    if enqueue:
        rows.insert(0, _ours_enqueue(enqueue))
    if ours:
        rows.insert(1 if enqueue else 0, ours)
    out = result(
        "raw",
        "The raw Kafka limit vs ours",
        {
            "jobs": config.jobs,
            "record_bytes": len(ctx.preloader().sample_record()[1]),
            "records": "the backlog's own records (produce: copied to a new topic)",
        },
        rows,
    )
    out["ratios"] = {
        "our_drain_vs_raw_consume": ratio(
            ours["jobs_per_s"] if ours else None, consumed_row["jobs_per_s"]
        ),
        "our_drain_variant": ours["variant"] if ours else None,
        "our_enqueue_vs_raw_produce": ratio(
            enqueue["jobs_per_s"] if enqueue else None, produced_row["jobs_per_s"]
        ),
    }
    return out


def _ours_enqueue(enqueue: dict[str, Any]) -> dict[str, Any]:
    """Our enqueue rate while the backlog was written (``JobProducer.enqueue_batch``)."""
    return {
        "system": "ours",
        "variant": "enqueue_batch (validate, Avro, acks=all)",
        "jobs": enqueue["jobs"],
        "seconds": enqueue["seconds"],
        "jobs_per_s": enqueue["jobs_per_s"],
        "note": "the pre-load of the drain backlog, in the orchestrator process",
    }


def _row(variant: str, measured: dict[str, Any], broker_cpu: float) -> dict[str, Any]:
    jobs, seconds = int(measured["records"]), float(measured["seconds"])
    cpu = {"client": float(measured["cpu_s"]), "broker": broker_cpu}
    return {
        "system": "raw kafka",
        "variant": variant,
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_s": round(jobs / seconds, 1) if seconds else 0.0,
        "cpu_s_per_1000_jobs": procs.per_thousand(cpu, jobs),
        "note": "broker CPU counted over the whole process, start-up included",
    }
