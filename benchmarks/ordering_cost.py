"""What per-key ordering costs a drain: the same drain with 1,000 ordering keys and
without keys, interleaved.

Both backlogs hold the same no-op jobs over the same tenants; in the ordered one
every job also carries one of ``KEYS`` ordering keys (round-robin, so each key's
jobs are spread through its tenant's partition). Nothing fails, so the cost
measured is the steady one: each job passes its key's line before the window,
and a key's next job is released when the one before it ends. The cost is CPU-s
per 1,000 jobs of the leasekeeper and the workers (the client CPU), medians of
the runs of each side; the runs alternate (keys, none, keys, none, ...) because
the machine is shared and its load drifts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from benchmarks.measure import DrainResult

__all__ = ["KEYS", "ORDER", "lines", "measure"]

KEYS = 1_000
ORDER = ("keys", "none")
CLIENT = ("leasekeeper", "workers")

Drain = Callable[[bool], DrainResult]


def measure(drain: Drain, repeats: int) -> dict[str, Any]:
    """``repeats`` interleaved pairs of drains (``drain(ordered)``), summarised."""
    runs: list[dict[str, Any]] = []
    for index in range(repeats):
        for side in ORDER:
            row = drain(side == "keys").row()
            cpu = row["cpu_s_per_1000_jobs"]
            cpu["client"] = round(sum(cpu.get(k, 0.0) for k in CLIENT), 4)
            runs.append({**row, "ordering_keys": KEYS if side == "keys" else 0,
                         "side": side, "order": len(runs) + 1, "pair": index + 1})  # fmt: skip
    return summarise(runs)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians: dict[str, dict[str, float]] = {}
    for side in ORDER:
        rows = [r for r in runs if r["side"] == side and not r.get("capped")]
        if rows:
            medians[side] = {
                key: round(
                    statistics.median(r["cpu_s_per_1000_jobs"].get(key, 0.0) for r in rows), 4
                )
                for key in (*CLIENT, "client")
            }
            medians[side]["jobs_per_s"] = round(statistics.median(r["jobs_per_s"] for r in rows))
    keys, none = medians.get("keys", {}), medians.get("none", {})
    extra = (
        round(100 * (keys["client"] - none["client"]) / none["client"], 1)
        if keys and none.get("client")
        else None
    )
    return {"runs": runs, "medians": medians, "client_overhead_percent": extra}


def lines(section: dict[str, Any]) -> list[str]:
    out = []
    for row in section.get("runs", []):
        cpu = row["cpu_s_per_1000_jobs"]
        out.append(
            f"  ordering keys {row['ordering_keys']:>5} (run {row['order']}): "
            f"{row['jobs_per_s']:,.0f} jobs/s; client CPU-s/1000 jobs {cpu['client']:.4f} "
            f"(leasekeeper {cpu.get('leasekeeper', 0):.4f}, workers {cpu.get('workers', 0):.4f})"
        )
    extra = section.get("client_overhead_percent")
    if extra is not None:
        out.append(f"  {KEYS:,} ordering keys cost {extra:+.1f}% client CPU per job")
    return out
