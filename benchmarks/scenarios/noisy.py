"""Noisy neighbour: one tenant's flood against other tenants' and critical jobs.

A tenant enqueues a flood (200,000 jobs; 20,000 with --quick) into one queue. Once
the workers are running it, other tenants' default jobs and critical jobs are
paced at 50/s each for ``latency_s``. Reported: the start latency (handler start
minus enqueue) p50/p99/max of the other tenants and of the critical class, and the
flooder's drain rate during that time against the no-flood drain rate (the drain
scenario's best row). On code without priority classes the critical row is n/a.

It runs twice, in one report: the flood written into its tenant's ready partition
(the producer's flood diversion off: how every flood landed before it), then with
the producer's defaults, which divert the flood to the overflow lane.
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
from benchmarks.scenarios import result
from benchmarks.scenarios.latency import percentile
from producer import FloodPolicy, JobProducer, JobRequest

FLOOD, OTHERS, CRITICAL = 0, 1, 2
FLOOD_JOBS, QUICK_FLOOD_JOBS = 200_000, 20_000
RATE = 50.0
# How long the flood's drain rate is measured alone, after the paced phase.
ALONE_S = 5.0
OTHER_TENANTS = 30


# The two runs: (label, the flood's producer policy).
VARIANTS = (
    ("flood in its ready partition (diversion off)", FloodPolicy.off()),
    ("flood diverted by its producer (the default)", FloodPolicy()),
)


def _flood(ctx: BenchContext, loader: Any, count: int, policy: FloodPolicy) -> None:
    requests = (
        JobRequest(
            queue=loader.queue,
            type=JOB_TYPE,
            payload={"n": FLOOD * NOISY_GROUP_SCALE + n},
            tenant_id="big-backfill",
        )
        for n in range(count)
    )
    with JobProducer(ctx.settings, registry=loader.registry, flood=policy) as producer:
        producer.enqueue_batch(requests)


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


def _alone_rate(directory: Any, flood_jobs: int) -> float | None:
    """The flood's drain rate with nothing else enqueued (after the paced phase), over
    ALONE_S; None when too little of the flood is left to measure it."""
    before = len(_groups(directory)[FLOOD])
    started = time.monotonic()
    time.sleep(ALONE_S)
    done = len(_groups(directory)[FLOOD]) - before
    if before + done >= flood_jobs:
        return None
    return done / (time.monotonic() - started)


def _measure(
    ctx: BenchContext, flood_jobs: int, policy: FloodPolicy
) -> tuple[dict[int, list[float]], float, Any]:
    """(samples per group, flood rate while paced, flood rate alone)."""
    config = ctx.config
    loader = ctx.preloader(f"noisy{uuid.uuid4().hex[:4]}")
    system = OurSystem(
        ctx.settings, loader.queue, ctx.fresh_dir("noisy"), partitions=config.partitions, prefix=[]
    )
    directory = system.progress_dir
    try:
        _flood(ctx, loader, flood_jobs, policy)
        system.start_leasekeeper()
        system.start_workers("noisy_app", config.processes, config.concurrency, {})
        procs.wait_until(lambda: progress.read(directory).count >= 1, 120, "the flood to start")
        flooded_before = len(_groups(directory)[FLOOD])
        started = time.monotonic()
        sent = _pace(loader.producer, loader.queue, config.latency_s, _critical_built())
        paced_rate = (len(_groups(directory)[FLOOD]) - flooded_before) / (
            time.monotonic() - started
        )

        def all_paced() -> bool:
            groups = _groups(directory)
            return len(groups[OTHERS]) + len(groups[CRITICAL]) >= sent

        procs.wait_until(all_paced, 300, "every paced job to start")
        alone = _alone_rate(directory, flood_jobs)
        return _groups(directory), paced_rate, alone
    finally:
        system.stop()


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    flood_jobs = QUICK_FLOOD_JOBS if config.quick else FLOOD_JOBS
    rows: list[dict[str, Any]] = []
    alone_rates: dict[str, Any] = {}
    for label, policy in VARIANTS:
        groups, paced_rate, alone = _measure(ctx, flood_jobs, policy)
        alone_rates[label] = None if alone is None else round(alone)
        rows += [
            _row(f"{label}: other tenants (default class, {RATE:g}/s)", groups[OTHERS]),
            _row(f"{label}: critical class ({RATE:g}/s)", groups[CRITICAL]),
            {
                "system": "ours",
                "variant": f"{label}: flooder drain rate while the others are paced",
                "drain_jobs_per_s": round(paced_rate),
                "share_of_no_flood_rate": None if not alone else round(paced_rate / alone, 3),
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
            "no_flood_rate": {
                label: "n/a: too little of the flood was left to measure it alone"
                if rate is None
                else rate
                for label, rate in alone_rates.items()
            },
        },
        rows,
    )
