"""A plain-text summary of a results directory, printed at the end of every run.

It reads the JSON files rather than the in-memory results, so the summary of
``--scenario raw`` still shows the drain numbers of an earlier run in the same
directory (and says which file each came from).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import ordering_cost, status_cost
from benchmarks.config import SCENARIOS


def load(out_dir: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for name in SCENARIOS:
        path = out_dir / f"{name}.json"
        if path.exists():
            found[name] = json.loads(path.read_text())
    return found


def render(out_dir: Path) -> str:
    lines = [f"results in {out_dir}"]
    for name, outcome in load(out_dir).items():
        lines.append(f"\n== {name}: {outcome.get('title', '')} [{outcome['status']}]")
        for row in outcome.get("rows", []):
            lines.append("  " + _row(row))
        for key, value in (outcome.get("ratios") or {}).items():
            lines.append(f"  ratio {key}: {value}")
        if outcome.get("status_cost"):
            lines.extend(status_cost.lines(outcome["status_cost"]))
        if outcome.get("ordering_cost"):
            lines.extend(ordering_cost.lines(outcome["ordering_cost"]))
    return "\n".join(lines)


def _row(row: dict[str, Any]) -> str:
    head = f"{row.get('system', '')} {row.get('variant', '')}".strip()
    if row.get("status", "ok") != "ok":
        return f"{head}: {row['status']}"
    parts = []
    if "jobs_per_s" in row:
        parts.append(f"{row['jobs_per_s']:,.0f} jobs/s ({row['jobs']:,} in {row['seconds']:.1f}s)")
    for key in ("p50_ms", "p99_ms", "p999_ms", "achieved_rate"):
        if row.get(key) is not None:
            parts.append(f"{key} {row[key]}")
    for key in ("max_ms", "drain_jobs_per_s", "alone_jobs_per_s", "share_of_alone_rate", "run_s"):
        if row.get(key) is not None:
            parts.append(f"{key} {row[key]}")
    for key in ("recovery_s", "duplicates", "lost", "rss_max_mib", "us_per_job"):
        if key in row:
            parts.append(f"{key} {row[key]}")
    if row.get("cpu_s_per_1000_jobs"):
        cpu = ", ".join(f"{k} {v:.3f}" for k, v in row["cpu_s_per_1000_jobs"].items())
        parts.append(f"CPU-s/1000 jobs: {cpu}")
    return f"{head}: " + "; ".join(parts)
