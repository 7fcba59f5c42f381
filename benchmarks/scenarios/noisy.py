"""Noisy neighbour: one tenant's flood against other tenants' and critical jobs.

A tenant enqueues a flood (200,000 jobs; 20,000 with --quick) into one queue. Once
the workers are running it, other tenants' default jobs and critical jobs are
paced at 50/s each for ``latency_s``. Reported: the start latency (handler start
minus enqueue) p50/p99/max of the other tenants and of the critical class, and the
flooder's drain rate during that time against the no-flood drain rate (the drain
scenario's best row). On code without priority classes the critical row is n/a.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import Future
from typing import Any

from benchmarks import procs, progress
from benchmarks.apps import JOB_TYPE, NOISY_GROUP_SCALE
from benchmarks.context import BenchContext
from benchmarks.ours import OurSystem
from benchmarks.scenarios import ours_best, result
from benchmarks.scenarios.latency import percentile
from producer import JobProducer, JobRequest

FLOOD, OTHERS, CRITICAL = 0, 1, 2
FLOOD_JOBS, QUICK_FLOOD_JOBS = 200_000, 20_000
RATE = 50.0
OTHER_TENANTS = 30


def _flood(loader: Any, count: int) -> None:
    requests = (
        JobRequest(
            queue=loader.queue,
            type=JOB_TYPE,
            payload={"n": FLOOD * NOISY_GROUP_SCALE + n},
            tenant_id="big-backfill",
        )
        for n in range(count)
    )
    loader.producer.enqueue_batch(requests)


def _pace(producer: JobProducer, queue: str, seconds: float, critical: bool) -> int:
    """Others' default jobs (and critical ones, when built) at RATE/s each; returns sent."""
    futures: list[Future[str]] = []
    started, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < seconds:
        for _ in range(int(RATE * elapsed) - sent):
            tenant = f"tenant-{sent % OTHER_TENANTS}"
            payload = {"n": OTHERS * NOISY_GROUP_SCALE + sent}
            futures.append(producer.enqueue_nowait(queue, JOB_TYPE, payload, tenant_id=tenant))
            if critical:
                urgent = {"n": CRITICAL * NOISY_GROUP_SCALE + sent}
                futures.append(
                    producer.enqueue_nowait(
                        queue, JOB_TYPE, urgent, tenant_id=tenant, priority="critical"
                    )
                )
            sent += 1
        time.sleep(0.01)
    producer.flush(60)
    for future in futures:
        future.result()
    return len(futures)


def _groups(directory: Any) -> dict[int, list[float]]:
    groups: dict[int, list[float]] = {FLOOD: [], OTHERS: [], CRITICAL: []}
    for sample in progress.samples(directory):
        group, latency = divmod(sample, NOISY_GROUP_SCALE)
        groups.setdefault(int(group), []).append(latency)
    return groups


def _row(label: str, values: list[float]) -> dict[str, Any]:
    if not values:
        return {"system": "ours", "variant": label, "status": "n/a — not built on this code"}
    return {
        "system": "ours",
        "variant": label,
        "jobs": len(values),
        "p50_ms": percentile(values, 0.5),
        "p99_ms": percentile(values, 0.99),
        "max_ms": round(max(values), 2),
    }


def _critical_built() -> bool:
    try:
        JobRequest(queue="q", type=JOB_TYPE, payload={}, tenant_id="t", priority="critical")
    except (ValueError, TypeError):
        return False
    return True


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    flood_jobs = QUICK_FLOOD_JOBS if config.quick else FLOOD_JOBS
    loader = ctx.preloader(f"noisy{uuid.uuid4().hex[:4]}")
    system = OurSystem(
        ctx.settings, loader.queue, ctx.fresh_dir("noisy"), partitions=config.partitions, prefix=[]
    )
    directory = system.progress_dir
    critical = _critical_built()
    try:
        _flood(loader, flood_jobs)
        system.start_leasekeeper()
        system.start_workers("noisy_app", config.processes, config.concurrency, {})
        procs.wait_until(lambda: progress.read(directory).count >= 1, 120, "the flood to start")
        flooded_before = len(_groups(directory)[FLOOD])
        started = time.monotonic()
        sent = _pace(loader.producer, loader.queue, config.latency_s, critical)
        paced_s = time.monotonic() - started
        flooded = len(_groups(directory)[FLOOD]) - flooded_before

        def all_paced() -> bool:
            groups = _groups(directory)
            return len(groups[OTHERS]) + len(groups[CRITICAL]) >= sent

        procs.wait_until(all_paced, 300, "every paced job to start")
        groups = _groups(directory)
    finally:
        system.stop()
    best = ours_best(ctx)
    flood_rate = flooded / paced_s
    rows = [
        _row(f"other tenants (default class, {RATE:g}/s)", groups[OTHERS]),
        _row(f"critical class ({RATE:g}/s)", groups[CRITICAL]),
        {
            "system": "ours",
            "variant": "flooder drain rate",
            "jobs_per_s": round(flood_rate),
            "share_of_no_flood_rate": None
            if not best
            else round(flood_rate / best["jobs_per_s"], 3),
        },
    ]
    return result(
        "noisy",
        "Noisy neighbour: start latency of other tenants and critical jobs during a flood",
        {
            "flood_jobs": flood_jobs,
            "paced_s": config.latency_s,
            "rate_per_group": RATE,
            "workers": f"{config.processes} x {config.concurrency} slots",
            "no_flood_rate": best["jobs_per_s"] if best else "run drain first",
        },
        rows,
    )
