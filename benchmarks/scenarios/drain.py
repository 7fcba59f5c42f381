"""Scenario 1: drain a pre-loaded backlog of no-op jobs with 1 leasekeeper and 1, 2, 4 workers."""

from __future__ import annotations

import statistics
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
    schema_registry: str | None = None,
    leasekeeper_args: tuple[str, ...] = (),
    worker_args: tuple[str, ...] = (),
) -> measure.DrainResult:
    """One fresh consumer group draining ``queue`` (which holds exactly ``jobs`` jobs);
    with ``schema_registry``, in registry mode (the backlog must be written in it)."""
    config = ctx.config
    system = OurSystem(
        ctx.settings,
        queue,
        ctx.fresh_dir("ours"),
        partitions=config.partitions,
        prefix=prefix or [],
        schema_registry=schema_registry,
    )
    try:
        system.start_leasekeeper(*leasekeeper_args)
        system.start_workers(app, workers, concurrency, extra=worker_args)

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
                **({"registry": ctx.registry_pids} if ctx.schema_registry else {}),
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


def _settings(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    return {
        "jobs": config.jobs,
        "tenants": config.tenants,
        "partitions": config.partitions,
        "payload_bytes": config.payload_bytes,
        "concurrency_per_worker": config.concurrency,
        "codec": config.codec,
        "enqueue": ctx.enqueue_rates[:2],
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    if config.codec == "both":
        return compare_codecs(ctx)
    registry_mode = config.codec == "registry"
    queue = ctx.backlog(config.jobs, codec=config.codec)
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
            variant=f"{label}, registry mode" if registry_mode else label,
            schema_registry=ctx.registry_url if registry_mode else None,
        )
        rows.append(outcome.row())
    if ctx.pinning.every and not config.quick and not registry_mode:
        rows.append(unpinned(ctx, queue))
    out = result("drain", "Drain throughput, no-op jobs", _settings(ctx), rows)
    if config.status_cost_repeats > 0 and not registry_mode:
        out["status_cost"] = status_cost_of(ctx, queue)
    if config.profile_s > 0 and not registry_mode:
        out["profile"] = profile.profile_drain(ctx, queue, max(config.drain_workers))
    return out


def compare_codecs(ctx: BenchContext) -> dict[str, Any]:
    """File mode against registry mode on the same drain, interleaved (file, registry,
    file, registry, ...) so a busy neighbour on a shared machine hits both alike.

    Each mode drains its own backlog of the same jobs (registry mode's is written in
    the Confluent wire format) with 2 workers, the drain's best row, after one
    warm-up drain of each. Registry mode's lookups are cached: ids are resolved at
    start-up, before the clock starts.
    """
    config = ctx.config
    workers = 2 if 2 in config.drain_workers else max(config.drain_workers)
    queues = {codec: ctx.backlog(config.jobs, codec=codec) for codec in CODEC_ORDER}
    rows = []
    # Round 0 warms up (the first drains after loading pay for a cold broker and page
    # cache); it is reported but left out of the medians.
    for round_no in range(config.codec_rounds + 1):
        for codec in CODEC_ORDER:
            label = f"round {round_no}" if round_no else "warm-up"
            outcome = drain_ours(
                ctx,
                workers=workers,
                concurrency=config.concurrency,
                app="noop_app",
                jobs=config.jobs,
                queue=queues[codec],
                variant=f"{workers} workers, {codec} mode, {label}",
                schema_registry=ctx.registry_url if codec == "registry" else None,
            )
            rows.append({**outcome.row(), "codec": codec, "round": round_no})
    out = result(
        "drain", "Drain throughput, no-op jobs: file mode against registry mode",
        _settings(ctx), rows,
    )  # fmt: skip
    out["ratios"] = codec_summary(rows)
    if config.profile_s > 0:
        out["profile"] = {
            codec: profile.profile_drain(
                ctx,
                queues[codec],
                workers,
                schema_registry=ctx.registry_url if codec == "registry" else None,
            )
            for codec in CODEC_ORDER
        }
    return out


CODEC_ORDER = ("file", "registry")


def client_cpu_per_1000(row: dict[str, Any]) -> float:
    """Leasekeeper plus workers: the client CPU registry mode could change."""
    cpu = row["cpu_s_per_1000_jobs"]
    return float(cpu.get("leasekeeper", 0.0) + cpu.get("workers", 0.0))


def codec_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per mode and registry mode's extra client CPU in percent of file mode's."""
    summary: dict[str, Any] = {}
    for codec in CODEC_ORDER:
        mine = [r for r in rows if r.get("codec") == codec and r.get("round")]
        summary[f"{codec}_client_cpu_s_per_1000"] = [round(client_cpu_per_1000(r), 4) for r in mine]
        summary[f"{codec}_median_client_cpu_s_per_1000"] = round(
            statistics.median(client_cpu_per_1000(r) for r in mine), 4
        )
        summary[f"{codec}_median_jobs_per_s"] = round(
            statistics.median(r["jobs_per_s"] for r in mine)
        )
    file_cpu = summary["file_median_client_cpu_s_per_1000"]
    extra = summary["registry_median_client_cpu_s_per_1000"] / file_cpu - 1 if file_cpu else 0.0
    summary["registry_extra_client_cpu_pct"] = round(100 * extra, 1)
    return summary


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
