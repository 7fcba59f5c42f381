"""Scenario 5: enqueue-to-handler-start latency under a steady paced load.

The producer stamps ``created_at_ms`` just before it produces; the handler
subtracts it from its own clock at its first line (same machine, same clock).
Workers are warmed up first so start-up is not counted as latency. Delayed
jobs are measured the same way against their due time (creation + delay);
on code without delayed jobs that row says "n/a".
"""

from __future__ import annotations

import statistics
import uuid
from typing import Any

from benchmarks import procs, progress
from benchmarks.apps import ENV_DELAY_MS, ENV_WARMUP_N
from benchmarks.context import BenchContext
from benchmarks.ours import OurSystem
from benchmarks.scenarios import ours_best, result

WARMUP_JOBS = 200
# Then this many seconds of the measured load itself, not measured either: the
# leasekeeper's first seconds (its topic families' consumers joining the group one
# rebalance after another) and the step from idle to the full rate stay out of the
# samples, which are the steady state's.
WARMUP_PACED_S = 3.0
NOT_BUILT = "n/a — scheduling not built yet"
# Delayed jobs: a short delay (through the 1 s delay tier) at a modest rate.
SCHEDULED_DELAY_S = 5.0
SCHEDULED_RATE = 200.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return round(ordered[index], 2)


def measure_rate(
    ctx: BenchContext,
    rate: float,
    label: str,
    *,
    prefix: list[str] | None = None,
    delay_s: float | None = None,
) -> dict[str, Any]:
    """Pace ``rate`` jobs/s for ``latency_s`` into a fresh queue; percentiles of the samples.

    With ``delay_s`` every job is due that long after it is enqueued and the
    samples are the lateness of its start against that due time.
    """
    config = ctx.config
    loader = ctx.preloader(f"lat{uuid.uuid4().hex[:4]}")  # a fresh queue per rate
    system = OurSystem(
        ctx.settings,
        loader.queue,
        ctx.fresh_dir("lat"),
        partitions=config.partitions,
        prefix=prefix or [],
    )
    app = "scheduled_app" if delay_s else "latency_app"
    warm_paced = round(rate * WARMUP_PACED_S)
    env = {
        ENV_WARMUP_N: str(WARMUP_JOBS + warm_paced),
        ENV_DELAY_MS: str((delay_s or 0) * 1000),
    }
    directory = system.progress_dir
    try:
        system.start_leasekeeper()
        system.start_workers(app, config.processes, config.concurrency, env)
        loader.load(WARMUP_JOBS)  # n = 0 .. WARMUP_JOBS-1: run, not measured
        procs.wait_until(lambda: progress.read(directory).count >= WARMUP_JOBS, 120, "warm-up jobs")
        # The paced warm-up runs straight into the measured load (no idle gap between).
        warmed = len(loader.paced(rate, 2 * WARMUP_PACED_S, delay=delay_s, limit=warm_paced))
        if warmed < warm_paced:  # a machine too slow to pace: the rest at once
            loader.load(warm_paced - warmed)
        # What our processes spend per job at this rate, where claims and settles carry
        # a few jobs each (a drain's carry hundreds).
        meter = procs.CpuMeter({"leasekeeper": system.leasekeeper_pids,
                                "workers": system.worker_pids})  # fmt: skip
        meter.start()
        sent = len(loader.paced(rate, config.latency_s, delay=delay_s))
        procs.wait_until(
            lambda: len(progress.samples(directory)) >= sent,
            120 + (delay_s or 0),
            "every paced job",
        )
        meter.stop()
        values = progress.samples(directory)
    finally:
        system.stop()
    return {
        "system": "ours",
        "variant": label,
        "target_rate": round(rate),
        "achieved_rate": round(sent / config.latency_s),
        "jobs": len(values),
        "p50_ms": percentile(values, 0.50),
        "p99_ms": percentile(values, 0.99),
        "p999_ms": percentile(values, 0.999),
        "max_ms": round(max(values), 2),
        "mean_ms": round(statistics.fmean(values), 2),
        "measures": "start minus due time" if delay_s else "start minus enqueue",
        "cpu_s_per_1000_jobs": procs.per_thousand(meter.used, sent),
    }


def scheduled(ctx: BenchContext) -> dict[str, Any]:
    """Lateness of delayed jobs, or the reason it cannot be measured on this code."""
    label = f"scheduled: {SCHEDULED_DELAY_S:g} s delay, {SCHEDULED_RATE:g} jobs/s"
    try:
        return measure_rate(ctx, SCHEDULED_RATE, label, delay_s=SCHEDULED_DELAY_S)
    except NotImplementedError:
        return {"system": "ours", "variant": "scheduled", "status": NOT_BUILT}


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    rates: list[tuple[float, str]] = [(r, f"{r:,.0f} jobs/s") for r in config.latency_rates]
    best = ours_best(ctx)
    skipped = []
    if config.latency_half_max:
        if best:
            half = best["jobs_per_s"] / 2
            rates.append((half, f"{half:,.0f} jobs/s (50% of max)"))
        else:
            skipped.append(
                {"system": "ours", "variant": "50% of max", "status": "skipped: run drain first"}
            )
    rows = [measure_rate(ctx, rate, label) for rate, label in rates] + skipped
    if ctx.pinning.every and not config.quick:
        # What pinning costs: the same first rate with our processes on every core.
        rate, label = rates[0]
        row = measure_rate(
            ctx, rate, f"{label}, not pinned", prefix=ctx.pinning.everywhere_prefix()
        )
        rows.append({**row, "pinned": False})
    late = scheduled(ctx)
    rows.append(late)
    return result(
        "latency",
        "Enqueue to handler start (scheduled: start minus due time)",
        {
            "seconds_per_rate": config.latency_s,
            "workers": f"{config.processes} x {config.concurrency} slots",
            "producer": "JobProducer.enqueue_nowait in 10 ms ticks, linger.ms=5",
            "scheduled_job_lateness": late.get("status", "measured: see the scheduled row"),
        },
        rows,
    )
