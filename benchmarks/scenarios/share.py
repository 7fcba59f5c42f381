"""Scenario 3: Kafka share groups (KIP-932) on the same broker and the same backlogs.

No-op load: one share consumer per process, as many processes as our best
drain used workers. 10 ms load: 4 processes x 8 consumer threads = 32
consumers on 8 partitions (more consumers than partitions, which only share
groups allow), each taking at most ``max.poll.records`` = 10 records per poll
so the records spread over the consumers.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from benchmarks import measure, procs, progress
from benchmarks.context import REPO, BenchContext
from benchmarks.scenarios import ours_best, ratio, result
from benchmarks.scenarios.drain import ours_io
from jobcore.kafka import set_group_config
from jobcore.topics import QueueTopics

IO_MAX_POLL_RECORDS = 10


def drain_share(
    ctx: BenchContext,
    *,
    queue: str,
    jobs: int,
    processes: int,
    threads: int,
    sleep_ms: float,
    variant: str,
) -> measure.DrainResult:
    group = f"share-{uuid.uuid4().hex[:8]}"
    # Share groups start at the log end by default; the backlog is behind it.
    set_group_config(ctx.settings, group, {"share.auto.offset.reset": "earliest"})
    workdir = ctx.fresh_dir("share")
    cmd = [
        sys.executable, "-m", "benchmarks.sharegroup",
        "--bootstrap", str(ctx.bootstrap), "--topic", QueueTopics(queue=queue).ready,
        "--group", group, "--threads", str(threads), "--sleep-ms", str(sleep_ms),
    ]  # fmt: skip
    if sleep_ms:
        cmd += ["--max-poll-records", str(IO_MAX_POLL_RECORDS)]
    env = {progress.ENV_DIR: str(workdir)}
    running = [
        procs.start(cmd, log=workdir / f"share-{i}.log", env=env, cwd=REPO)
        for i in range(processes)
    ]

    def alive() -> None:
        for process in running:
            if process.poll() is not None:
                log = (workdir / "share-0.log").read_text()[-2000:]
                raise RuntimeError(f"a share consumer exited: {log}")

    try:
        return measure.drain(
            system="kafka share group",
            variant=variant,
            progress_dir=workdir,
            total=jobs,
            components={"consumers": lambda: [p.pid for p in running], "broker": ctx.broker_pids},
            timeout_s=ctx.config.drain_timeout_s,
            alive=alive,
        )
    finally:
        for process in running:
            procs.stop(process, grace=20)


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    ours = ours_best(ctx)
    consumers = max(config.drain_workers)
    noop = drain_share(
        ctx,
        queue=ctx.backlog(config.jobs),
        jobs=config.jobs,
        processes=consumers,
        threads=1,
        sleep_ms=0,
        variant=f"no-op, {consumers} consumers",
    ).row()
    ours_slow = ours_io(ctx)
    slow = drain_share(
        ctx,
        queue=ctx.backlog(config.io_jobs, "io"),
        jobs=config.io_jobs,
        processes=config.processes,
        threads=config.io_concurrency,
        sleep_ms=config.io_ms,
        variant=f"{config.io_ms} ms I/O, {config.processes * config.io_concurrency} consumers",
    ).row()
    rows = [r for r in (ours, noop, ours_slow, slow) if r]
    out = result(
        "share",
        "Kafka share groups (KIP-932) vs ours",
        {
            "client": "confluent-kafka ShareConsumer, explicit acknowledgement of every record",
            "no_op_jobs": config.jobs,
            "io_jobs": config.io_jobs,
            "io_max_poll_records": IO_MAX_POLL_RECORDS,
        },
        rows,
    )
    out["ratios"] = {
        "ours_vs_share_no_op": ratio(ours["jobs_per_s"] if ours else None, noop["jobs_per_s"]),
        "ours_vs_share_io": ratio(ours_slow["jobs_per_s"], slow["jobs_per_s"]),
    }
    return out
