"""Scenario 7: leasekeeper RSS with a deep backlog and 1,000 leases in flight.

The window (``--window-records``, default 10,000) is what a leasekeeper keeps
in memory; the backlog stays in Kafka. So the RSS with a 1,000,000-job backlog
should match the RSS with a backlog five times smaller: both are sampled here,
with 1,000 jobs claimed over gRPC and never acked (a 300 s lease).
"""

from __future__ import annotations

import time
from typing import Any

import grpc

from benchmarks import procs
from benchmarks.context import BenchContext
from benchmarks.ours import OurSystem
from benchmarks.scenarios import result
from schemas import worker_pb2 as pb
from schemas import worker_pb2_grpc as pb_grpc

HOLD_LEASE_S = 300.0
SAMPLE_EVERY_S = 0.5


def hold_leases(target: str, count: int, timeout_s: float = 60) -> int:
    """Claim ``count`` jobs as one silent worker; returns how many are held."""
    held = 0
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.LeaseKeeperStub(channel)
        while held < count and time.monotonic() < deadline:
            request = pb.ClaimRequest(worker_id="holder", max_jobs=count - held, wait_ms=1000)
            held += len(stub.Claim(request, timeout=10).jobs)
    return held


def sample(ctx: BenchContext, queue: str, backlog: int, label: str) -> dict[str, Any]:
    config = ctx.config
    system = OurSystem(
        ctx.settings, queue, ctx.fresh_dir("memory"), partitions=config.partitions,
        lease_s=HOLD_LEASE_S,
    )  # fmt: skip
    started = time.monotonic()
    series: list[tuple[float, int]] = []
    try:
        system.start_leasekeeper()
        held = hold_leases(system.target, config.memory_leases)
        assert system.leasekeeper is not None
        pid = system.leasekeeper.pid
        end = time.monotonic() + config.memory_sample_s
        while time.monotonic() < end:
            series.append((round(time.monotonic() - started, 2), procs.rss_bytes(pid)))
            time.sleep(SAMPLE_EVERY_S)
        snap = system.snapshot() or {}
    finally:
        system.stop(kill=True)  # 1,000 leases are held on purpose: no graceful drain
    values = [rss for _, rss in series]
    return {
        "system": "ours",
        "variant": label,
        "backlog_jobs": backlog,
        "leases_in_flight": held,
        "window_ready": snap.get("ready"),
        "rss_max_mib": round(max(values) / 2**20, 1),
        "rss_last_mib": round(values[-1] / 2**20, 1),
        "rss_series": series,
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    small = max(config.jobs, config.memory_backlog // 5)
    rows = [sample(ctx, ctx.backlog(small), small, f"{small:,} backlog")]
    big = config.memory_backlog
    rows.append(sample(ctx, ctx.backlog(big), big, f"{big:,} backlog"))
    out = result(
        "memory",
        "Leasekeeper RSS: deep backlog, 1,000 leases in flight",
        {
            "window_records": 10_000,
            "leases_in_flight": config.memory_leases,
            "sample_s": config.memory_sample_s,
            "target": "RSS under 300 MB with a 1M backlog, same as with a small one",
        },
        rows,
    )
    out["ratios"] = {"rss_big_vs_small": round(rows[1]["rss_max_mib"] / rows[0]["rss_max_mib"], 3)}
    return out
