"""Scenario 4: the queues users pick instead, same no-op and 10 ms loads, same slots.

Redis and PostgreSQL come from Debian's packages (installed when missing and
allowed), each a private instance pinned like the broker. A peer that cannot
be installed or started becomes a "skipped: why" row; the others still run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from benchmarks import measure
from benchmarks.context import BenchContext
from benchmarks.load import blob
from benchmarks.peers.runners import CeleryPeer, DramatiqPeer, Peer, PostgresPeer
from benchmarks.peers.servers import PostgresServer, RedisServer, Unavailable
from benchmarks.scenarios import ours_best, ratio, result
from benchmarks.scenarios.drain import ours_io

log = logging.getLogger(__name__)


def drain_peer(ctx: BenchContext, peer: Peer, *, jobs: int, sleep_ms: float) -> dict[str, Any]:
    config = ctx.config
    slots = config.io_concurrency if sleep_ms else config.concurrency
    variant = (
        f"{config.io_ms} ms I/O, {config.processes} x {slots} slots"
        if sleep_ms
        else f"no-op, {config.processes} x {slots} slots"
    )
    started = time.monotonic()
    peer.load(jobs, blob(config.payload_bytes), config.tenants, sleep_ms)
    enqueue_s = time.monotonic() - started
    workdir = ctx.fresh_dir("peer")
    try:
        peer.start_workers(config.processes, slots, sleep_ms, workdir)
        row = measure.drain(
            system=peer.name,
            variant=variant,
            progress_dir=workdir,
            total=jobs,
            components={"workers": peer.worker_pids, "server": peer.server_pids},
            timeout_s=config.drain_timeout_s,
        ).row()
    finally:
        peer.stop_workers()
    row["enqueue_jobs_per_s"] = round(jobs / enqueue_s, 1)
    row["settings"] = peer.settings
    return row


def _skipped(name: str, reason: str) -> dict[str, Any]:
    return {"system": name, "variant": "", "status": f"skipped: {reason}"}


def _with_server(
    ctx: BenchContext,
    start: Callable[[], Any],
    peers: Callable[[Any], list[Peer]],
    names: list[str],
) -> list[dict[str, Any]]:
    """Start one server, run each of its peers under both loads, stop it."""
    config = ctx.config
    try:
        server = start()
    except Unavailable as exc:
        return [_skipped(name, str(exc)) for name in names]
    rows = []
    try:
        for peer in peers(server):
            for sleep_ms, jobs in ((0.0, config.peer_jobs), (float(config.io_ms), config.io_jobs)):
                try:
                    rows.append(drain_peer(ctx, peer, jobs=jobs, sleep_ms=sleep_ms))
                except Exception as exc:  # one peer's failure must not hide the others
                    log.exception("peer %s failed", peer.name)
                    rows.append(_skipped(peer.name, f"error: {type(exc).__name__}: {exc}"[:300]))
    finally:
        server.stop()
    return rows


def run(ctx: BenchContext) -> dict[str, Any]:
    config = ctx.config
    allow = config.peers_need_install
    rows = _with_server(
        ctx,
        lambda: RedisServer(pinning=ctx.pinning, allow_install=allow).start(),
        lambda redis: [CeleryPeer(redis), DramatiqPeer(redis)],
        [CeleryPeer.name, DramatiqPeer.name],
    )
    rows += _with_server(
        ctx,
        lambda: PostgresServer(pinning=ctx.pinning, allow_install=allow).start(),
        lambda pg: [PostgresPeer(pg)],
        [PostgresPeer.name],
    )
    ours = ours_best(ctx)
    ours_slow = ours_io(ctx)
    out = result(
        "peers",
        "The queues users pick instead, vs ours",
        {
            "no_op_jobs": config.peer_jobs,
            "io_jobs": config.io_jobs,
            "processes": config.processes,
            "redis": RedisServer.SETTINGS,
            "postgres": PostgresServer.SETTINGS,
        },
        [r for r in (ours, ours_slow) if r] + rows,
    )
    ratios: dict[str, Any] = {}
    for row in rows:
        if "jobs_per_s" not in row:
            continue
        mine = ours_slow if "I/O" in row["variant"] else ours
        load = "io" if "I/O" in row["variant"] else "no_op"
        key = f"ours_vs_{row['system'].split()[0]}_{load}"
        ratios[key] = ratio(mine["jobs_per_s"] if mine else None, row["jobs_per_s"])
    out["ratios"] = ratios
    return out
