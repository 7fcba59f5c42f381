"""Scenario 1: drain a pre-loaded backlog of no-op jobs with 1 leasekeeper and 1, 2, 4 workers."""

from __future__ import annotations

from typing import Any

from benchmarks import measure, profile, status_cost
from benchmarks.context import BenchContext
from benchmarks.ours import OurSystem
from benchmarks.scenarios import result


def ours_io(ctx: BenchContext) -> dict[str, Any]:
    """Our drain of the 10 ms-per-job backlog, measured once and shared by scenarios 3 and 4."""
    if "ours_io" not in ctx.cache:
        config = ctx.config
        queue = ctx.backlog(config.io_jobs, "io")
        outcome = drain_ours(
            ctx,
            workers=config.processes,
            concurrency=config.io_concurrency,
            app="io_app",
            jobs=config.io_jobs,
            queue=queue,
            variant=f"{config.io_ms} ms I/O, {config.processes} x {config.io_concurrency} slots",
        )
        ctx.cache["ours_io"] = outcome.row()
    row: dict[str, Any] = ctx.cache["ours_io"]
    return row


def drain_ours(
    ctx: BenchContext,
    *,
    workers: int,
    concurrency: int,
    app: str,
    jobs: int,
    queue: str,
    variant: str,
    prefix: list[str] | None = None,
    leasekeeper_args: tuple[str, ...] = (),
) -> measure.DrainResult:
    """One fresh consumer group draining ``queue`` (which holds exactly ``jobs`` jobs)."""
    config = ctx.config
    system = OurSystem(
        ctx.settings,
        queue,
        ctx.fresh_dir("ours"),
        partitions=config.partitions,
        prefix=prefix or [],
    )
    try:
        system.start_leasekeeper(*leasekeeper_args)
        system.start_workers(app, workers, concurrency)

        def alive() -> None:
            for process in [system.leasekeeper, *system.workers]:
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"a process exited: {system.log_tail('leasekeeper.log')}")

        return measure.drain(
            system="ours",
            variant=variant,
            progress_dir=system.progress_dir,
            total=jobs,
            components={
                "leasekeeper": system.leasekeeper_pids,
                "workers": system.worker_pids,
                "broker": ctx.broker_pids,
            },
            done=system.caught_up,
            timeout_s=config.drain_timeout_s,
            alive=alive,
        )
    finally:
        system.stop()


def unpinned(ctx: BenchContext, queue: str) -> dict[str, Any]:
    """The widest drain again with our processes free to use the broker's core too.

    Not used for ratios (every peer is pinned); it shows what the pinning costs
    us on a two-core machine where the broker idles part of its core.
    """
    config = ctx.config
    workers = max(config.drain_workers)
    outcome = drain_ours(
        ctx,
        workers=workers,
        concurrency=config.concurrency,
        app="noop_app",
        jobs=config.jobs,
        queue=queue,
        variant=f"{workers} workers, not pinned",
        prefix=ctx.pinning.everywhere_prefix(),
    )
    row = outcome.row()
    row["pinned"] = False
    return row


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    queue = ctx.backlog(config.jobs)
    rows = []
    for workers in config.drain_workers:
        label = f"{workers} worker{'s' if workers > 1 else ''}"
        outcome = drain_ours(
            ctx,
            workers=workers,
            concurrency=config.concurrency,
            app="noop_app",
            jobs=config.jobs,
            queue=queue,
            variant=label,
        )
        rows.append(outcome.row())
    if ctx.pinning.every and not config.quick:
        rows.append(unpinned(ctx, queue))
    out = result(
        "drain",
        "Drain throughput, no-op jobs",
        {
            "jobs": config.jobs,
            "tenants": config.tenants,
            "partitions": config.partitions,
            "payload_bytes": config.payload_bytes,
            "concurrency_per_worker": config.concurrency,
            "enqueue": ctx.enqueue_rates[:1],
        },
        rows,
    )
    if config.status_cost_repeats > 0:
        out["status_cost"] = status_cost_of(ctx, queue)
    if config.profile_s > 0:
        out["profile"] = profile.profile_drain(ctx, queue, max(config.drain_workers))
    return out


def status_cost_of(ctx: BenchContext, queue: str) -> dict[str, Any]:
    """The drain with 2 workers again, with and without status records, interleaved."""
    config = ctx.config
    workers = min(2, max(config.drain_workers))

    def drain(status_records: bool) -> measure.DrainResult:
        side = "on" if status_records else "off"
        return drain_ours(
            ctx,
            workers=workers,
            concurrency=config.concurrency,
            app="noop_app",
            jobs=config.jobs,
            queue=queue,
            variant=f"{workers} workers, status records {side}",
            leasekeeper_args=() if status_records else ("--no-status",),
        )

    section = status_cost.measure(drain, config.status_cost_repeats)
    section["workers"] = workers
    return section
