"""What status records cost a drain: the same drain with and without them, interleaved.

Every job that ends writes one record to ``jobs.Q.status`` (``leasekeeper serve
--no-status`` turns that off for a queue). The cost is measured as CPU-s per
1,000 jobs of the leasekeeper, the workers and the broker, over the same
backlog, in the same run. The machine is shared and its load drifts, so the
runs alternate (on, off, off, on, on, off, ...) instead of running all of one
kind first, and each side reports its median.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from benchmarks.measure import DrainResult

__all__ = ["ORDER", "lines", "measure", "summarise"]

# One pair per repeat, the first "on" then "off", the next the other way round: a
# machine that speeds up (or slows down) through the run would otherwise favour the
# side that always runs second (a full run had every "off" faster than the "on"
# before it, which overstated the cost).
ORDER = ("on", "off")
COMPONENTS = ("leasekeeper", "workers", "broker")

Drain = Callable[[bool], DrainResult]


def measure(drain: Drain, repeats: int) -> dict[str, Any]:
    """``repeats`` interleaved pairs of drains (``drain(status_records)``), summarised."""
    runs: list[dict[str, Any]] = []
    for index in range(repeats):
        for side in ORDER if index % 2 == 0 else ORDER[::-1]:
            outcome = drain(side == "on")
            row = outcome.row()
            row["status_records"] = side
            row["order"] = len(runs) + 1
            row["pair"] = index + 1
            row["cpu_s_per_1000_jobs"]["total"] = round(
                sum(row["cpu_s_per_1000_jobs"].get(k, 0.0) for k in COMPONENTS), 4
            )
            runs.append(row)
    return summarise(runs)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per side and component, and how much more "on" costs than "off"."""
    medians: dict[str, dict[str, float]] = {}
    for side in ORDER:
        rows = [r for r in runs if r["status_records"] == side and not r.get("capped")]
        medians[side] = (
            {
                key: round(
                    statistics.median(r["cpu_s_per_1000_jobs"].get(key, 0.0) for r in rows), 4
                )
                for key in (*COMPONENTS, "total")
            }
            if rows
            else {}
        )
    overhead = {
        key: _percent(medians["on"].get(key), medians["off"].get(key))
        for key in (*COMPONENTS, "total")
    }
    return {"runs": runs, "median_cpu_s_per_1000_jobs": medians, "overhead_percent": overhead}


def _percent(on: float | None, off: float | None) -> float | None:
    if on is None or not off:
        return None
    return round(100 * (on - off) / off, 1)


def lines(section: dict[str, Any]) -> list[str]:
    """The section as the end-of-run summary prints it."""
    out = []
    for row in section.get("runs", []):
        cpu = row["cpu_s_per_1000_jobs"]
        out.append(
            f"  status {row['status_records']:>3} (run {row['order']}): "
            f"{row['jobs_per_s']:,.0f} jobs/s; CPU-s/1000 jobs: total {cpu['total']:.4f} "
            f"(leasekeeper {cpu.get('leasekeeper', 0):.4f}, workers {cpu.get('workers', 0):.4f}"
            f", broker {cpu.get('broker', 0):.4f})"
        )
    medians = section.get("median_cpu_s_per_1000_jobs", {})
    overhead = section.get("overhead_percent", {})
    for side in ORDER:
        if medians.get(side):
            out.append(f"  median, status {side}: total {medians[side]['total']:.4f}")
    if overhead.get("total") is not None:
        parts = ", ".join(
            f"{key} {_signed(overhead.get(key))}" for key in ("leasekeeper", "broker")
        )
        out.append(f"  status records cost {_signed(overhead['total'])} CPU per job ({parts})")
    return out


def _signed(percent: float | None) -> str:
    """``+7.2%``, or "not measured" (the broker's CPU with ``--bootstrap``)."""
    return "not measured" if percent is None else f"{percent:+.1f}%"
