"""Noisy neighbour: one tenant's flood against other tenants' and critical jobs.

A tenant enqueues a flood (100,000 jobs; 20,000 with --quick) into one queue. Once
the workers are running it, the flood's drain rate alone is measured for
``ALONE_S``; then other tenants' default jobs and critical jobs are paced at 50/s
each for ``latency_s``. Reported: the start latency (handler start minus enqueue)
p50/p99/max of the other tenants and of the critical class, and the flooder's
drain rate over the first ``PACED_RATE_S`` of the paced phase against its rate
alone. On code without priority classes the critical row is n/a.

It runs once per way a flood reaches Kafka, in one report: written undiverted into
its tenant's ready partition (the producer's diversion off: how a producer in
another language, a backfill tool or a restarted producer writes one), staged in
the outbox and moved by a relay that never diverts (``noisy_relay``), by ten
producers at once (each with the default diversion), and by one producer with the
default diversion. ``make bench SCENARIO=noisy`` adds two undiverted floods of
1,000,000 jobs: a backlog written before the leasekeeper starts, and one written by
another process while the queue runs (``_measure_live``: the others enqueued during
the write and after it are reported apart).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from benchmarks import procs, progress
from benchmarks.apps import JOB_TYPE, NOISY_GROUP_SCALE
from benchmarks.context import REPO, BenchContext
from benchmarks.ours import OurSystem
from benchmarks.scenarios import result
from benchmarks.scenarios.latency import percentile
from benchmarks.scenarios.noisy_relay import (
    RELAY_LABEL,
    RelayUnavailable,
    flood_request,
    outbox_writer,
)
from producer import FloodPolicy, JobProducer, JobRequest

FLOOD, OTHERS, CRITICAL = 0, 1, 2
# Other tenants' jobs enqueued while the flood is being written (the live run only).
INSIDE = 3
FLOOD_JOBS, QUICK_FLOOD_JOBS, BIG_FLOOD_JOBS = 100_000, 20_000, 1_000_000
RATE = 50.0
# How long the flood's drain rate is measured alone, before the paced phase, and
# over how much of the paced phase it is measured again (the flood must last).
ALONE_S = 4.0
PACED_RATE_S = 4.0
OTHER_TENANTS = 30
PARALLEL_PRODUCERS = 10


# The runs: (label, the flood's producer policy, producers writing it at once).
VARIANTS = (
    ("flood in its ready partition (diversion off)", FloodPolicy.off(), 1),
    (f"flood from {PARALLEL_PRODUCERS} producers at once (default diversion)", FloodPolicy(),
     PARALLEL_PRODUCERS),
    ("flood diverted by its producer (the default)", FloodPolicy(), 1),
)  # fmt: skip
BIG_VARIANT = ("1,000,000-job backlog in its ready partition, written before the leasekeeper "
               "started (diversion off)", FloodPolicy.off(), 1)  # fmt: skip
LIVE_LABEL = "1,000,000-job flood written while the queue runs (diversion off)"


def _flood(
    ctx: BenchContext, loader: Any, count: int, *, policy: FloodPolicy, producers: int
) -> None:
    """``count`` jobs of one tenant, split among ``producers`` producers writing at once
    (each its own ``JobProducer``, so each its own flood allowance)."""

    def write(part: int) -> None:
        requests = (flood_request(loader.queue, n) for n in range(part, count, producers))
        with JobProducer(ctx.settings, registry=loader.registry, flood=policy) as producer:
            producer.enqueue_batch(requests)

    with ThreadPoolExecutor(producers) as pool:
        list(pool.map(write, range(producers)))


def _pace(producer: JobProducer, queue: str, seconds: float, critical: bool,
          others: Callable[[], int] = lambda: OTHERS,
          longer: Callable[[], bool] = lambda: False) -> int:  # fmt: skip
    """Others' default jobs (and critical ones, when built) at RATE/s each, for
    ``seconds`` and while ``longer()``; returns sent. ``others()``: their group now."""
    futures: list[Future[str]] = []
    started, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < seconds or longer():
        for _ in range(int(RATE * elapsed) - sent):
            tenant = f"tenant-{sent % OTHER_TENANTS}"
            payload = {"n": others() * NOISY_GROUP_SCALE + sent}
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
    groups: dict[int, list[float]] = {FLOOD: [], OTHERS: [], CRITICAL: [], INSIDE: []}
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


def _flood_rate(directory: Any, seconds: float) -> float:
    """The flood's jobs started per second over the next ``seconds``."""
    before = len(_groups(directory)[FLOOD])
    started = time.monotonic()
    time.sleep(seconds)
    return (len(_groups(directory)[FLOOD]) - before) / (time.monotonic() - started)


Writer = Callable[[BenchContext, Any, int], None]


def _fresh_system(ctx: BenchContext) -> tuple[Any, OurSystem]:
    """A fresh queue's loader and the leasekeeper and workers that will serve it."""
    loader = ctx.preloader(f"noisy{uuid.uuid4().hex[:4]}")
    system = OurSystem(ctx.settings, loader.queue, ctx.fresh_dir("noisy"),
                       partitions=ctx.config.partitions, prefix=[])  # fmt: skip
    return loader, system


def _all_started(directory: Any, sent: int, flood_jobs: int) -> dict[int, list[float]]:
    """The samples, once every paced job and every flood job has started (a fetch
    that dropped records would lose some, and fail the run)."""

    def all_paced() -> bool:
        groups = _groups(directory)
        return sum(len(groups[g]) for g in (OTHERS, INSIDE, CRITICAL)) >= sent

    procs.wait_until(all_paced, 300, "every paced job to start")
    procs.wait_until(lambda: len(_groups(directory)[FLOOD]) >= flood_jobs,
                     600, "every flood job to start")  # fmt: skip
    return _groups(directory)


def _measure(
    ctx: BenchContext, flood_jobs: int, write: Writer
) -> tuple[dict[int, list[float]], float, float]:
    """(samples per group, flood rate while paced, flood rate alone); ``write`` writes
    the flood before the leasekeeper starts."""
    config = ctx.config
    loader, system = _fresh_system(ctx)
    directory = system.progress_dir
    try:
        write(ctx, loader, flood_jobs)
        system.start_leasekeeper()
        system.start_workers("noisy_app", config.processes, config.concurrency, {})
        procs.wait_until(lambda: progress.read(directory).count >= 1, 120, "the flood to start")
        alone = _flood_rate(directory, ALONE_S)
        paced: list[float] = []
        sampler = threading.Thread(
            target=lambda: paced.append(_flood_rate(directory, PACED_RATE_S))
        )
        sampler.start()
        sent = _pace(loader.producer, loader.queue, config.latency_s, _critical_built())
        sampler.join()

        return _all_started(directory, sent, flood_jobs), paced[0], alone
    finally:
        system.stop()


def _measure_live(ctx: BenchContext, flood_jobs: int) -> tuple[dict[int, list[float]], float]:
    """The flood written while the leasekeeper and workers run, as a backfill reaches a
    running queue: the others are paced from the flood's first record to
    ``latency_s`` after its last (``INSIDE`` while it is written, ``OTHERS`` after).
    Returns (samples per group, the flood's drain rate once written)."""
    config = ctx.config
    loader, system = _fresh_system(ctx)
    directory = system.progress_dir
    try:
        system.start_leasekeeper()
        system.start_workers("noisy_app", config.processes, config.concurrency, {})
        written = threading.Event()
        rate: list[float] = []

        def write() -> None:
            # From a process of its own, as a backfill tool writes: this one paces.
            command = [sys.executable, "-m", "benchmarks.scenarios.flood_writer",
                       ctx.settings.bootstrap, loader.queue, str(flood_jobs)]  # fmt: skip
            try:
                subprocess.run(command, check=True, cwd=REPO)
            finally:
                written.set()
            rate.append(_flood_rate(directory, PACED_RATE_S))

        writer = threading.Thread(target=write)
        writer.start()
        critical = _critical_built()
        sent = _pace(loader.producer, loader.queue, 0, critical,
                     others=lambda: OTHERS if written.is_set() else INSIDE,
                     longer=lambda: not written.is_set())  # fmt: skip
        sent += _pace(loader.producer, loader.queue, config.latency_s, critical)
        writer.join()

        return _all_started(directory, sent, flood_jobs), rate[0]
    finally:
        system.stop()


def _live_rows(ctx: BenchContext, alone: float) -> list[dict[str, Any]]:
    """The live 1,000,000-job run's rows; ``alone``: the backlog run's rate alone."""
    started = time.monotonic()
    groups, rate = _measure_live(ctx, BIG_FLOOD_JOBS)
    return [
        _row(f"{LIVE_LABEL}: other tenants enqueued while it was written ({RATE:g}/s)",
             groups[INSIDE]),
        _row(f"{LIVE_LABEL}: other tenants enqueued after it ({RATE:g}/s)", groups[OTHERS]),
        _row(f"{LIVE_LABEL}: critical class ({RATE:g}/s)", groups[CRITICAL]),
        _rate_row(f"{LIVE_LABEL}: flooder drain rate once written, the others paced",
                  rate, alone, started),
    ]  # fmt: skip


def _rate_row(variant: str, rate: float, alone: float, started: float) -> dict[str, Any]:
    """The flooder's drain rate against its rate alone; ``started``: the run's start."""
    return {
        "system": "ours",
        "variant": variant,
        "drain_jobs_per_s": round(rate),
        "alone_jobs_per_s": round(alone),
        "share_of_alone_rate": round(rate / alone, 3) if alone else None,
        "run_s": round(time.monotonic() - started, 1),
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    flood_jobs = QUICK_FLOOD_JOBS if config.quick else FLOOD_JOBS
    rows: list[dict[str, Any]] = []
    alone_rates: dict[str, Any] = {}
    runs: list[tuple[str, Writer, int]] = [
        (label, partial(_flood, policy=policy, producers=producers), flood_jobs)
        for label, policy, producers in VARIANTS
    ]
    relay = outbox_writer()
    runs.insert(1, (RELAY_LABEL, relay.write, flood_jobs))
    if config.big_flood:
        label, policy, producers = BIG_VARIANT
        runs.append((label, partial(_flood, policy=policy, producers=producers), BIG_FLOOD_JOBS))
    try:
        for label, write, jobs in runs:
            started = time.monotonic()
            try:
                groups, paced_rate, alone = _measure(ctx, jobs, write)
            except RelayUnavailable as exc:
                rows.append({"system": "ours", "variant": label, "status": f"n/a: {exc}"})
                continue
            alone_rates[label] = round(alone)
            rows += [
                _row(f"{label}: other tenants (default class, {RATE:g}/s)", groups[OTHERS]),
                _row(f"{label}: critical class ({RATE:g}/s)", groups[CRITICAL]),
                _rate_row(f"{label}: flooder drain rate while the others are paced",
                          paced_rate, alone, started),
            ]  # fmt: skip
    finally:
        relay.close()
    if config.big_flood:
        rows += _live_rows(ctx, alone_rates[BIG_VARIANT[0]])
    return result(
        "noisy",
        "Noisy neighbour: start latency of other tenants and critical jobs during a flood",
        {
            "flood_jobs": flood_jobs,
            "big_flood_jobs": BIG_FLOOD_JOBS if config.big_flood else None,
            "paced_s": config.latency_s,
            "rate_per_group": RATE,
            "workers": f"{config.processes} x {config.concurrency} slots",
            "flood_rate_alone": alone_rates,
        },
        rows,
    )
