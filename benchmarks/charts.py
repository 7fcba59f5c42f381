"""One small PNG per scenario (matplotlib, no display needed).

Charts are drawn from the same rows the JSON holds, so a picture can never
show a number the results file does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

OURS = "#1f77b4"
OTHER = "#999999"


def draw(result: dict[str, Any], out_dir: Path) -> str:
    """Draw ``result`` into ``<scenario>.png`` under ``out_dir``; returns the file name."""
    scenario = result["scenario"]
    height = max(3.0, 0.45 * len(result["rows"]) + 1.2)
    fig, ax = plt.subplots(figsize=(8.0, height), dpi=90)
    if scenario == "latency":
        _latency(ax, result["rows"])
    elif scenario == "recovery":
        _recovery(ax, result["rows"])
    elif scenario == "memory":
        _memory(ax, result["rows"])
    else:
        _throughput(ax, result["rows"])
    ax.set_title(result.get("title", scenario), fontsize=11)
    fig.tight_layout()
    name = f"{scenario}.png"
    fig.savefig(out_dir / name)
    plt.close(fig)
    return name


def _label(row: dict[str, Any]) -> str:
    return f"{row['system']}: {row['variant']}"


def _throughput(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Horizontal bars, one per system and load, so long labels stay readable."""
    rows = [r for r in rows if r.get("jobs_per_s")]
    values = [r["jobs_per_s"] for r in rows]
    colors = [OURS if r["system"] == "ours" else OTHER for r in rows]
    positions = list(range(len(rows)))[::-1]
    bars = ax.barh(positions, values, color=colors)
    ax.set_yticks(positions, [_label(r) for r in rows], fontsize=7)
    ax.bar_label(bars, labels=[f" {v:,.0f}" for v in values], fontsize=7)
    ax.set_xlabel("jobs/s (higher is better)")
    if values and max(values) > 20 * min(values):
        ax.set_xscale("log")  # raw Kafka next to a Python queue: a linear axis hides one side
    ax.margins(x=0.15)


def _latency(ax: Any, rows: list[dict[str, Any]]) -> None:
    rows = [r for r in rows if "p50_ms" in r]
    marks = ("p50_ms", "p99_ms", "p999_ms")
    width = 0.25
    for i, mark in enumerate(marks):
        values = [r.get(mark) or 0.0 for r in rows]
        bars = ax.bar([x + i * width for x in range(len(rows))], values, width, label=mark[:-3])
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], fontsize=7)
    ax.set_xticks([x + width for x in range(len(rows))], [r["variant"] for r in rows], fontsize=8)
    ax.set_ylabel("milliseconds")
    ax.legend(fontsize=8)


def _recovery(ax: Any, rows: list[dict[str, Any]]) -> None:
    values = [r.get("recovery_s") or 0.0 for r in rows]
    bars = ax.bar(range(len(rows)), values, color=OURS)
    ax.set_xticks(range(len(rows)), [r["variant"] for r in rows], fontsize=8)
    ax.bar_label(
        bars,
        labels=[
            f"{v:.1f}s: {r.get('affected_jobs')} affected, "
            f"{r.get('affected_ran_twice')} ran twice, {r.get('lost')} lost"
            for v, r in zip(values, rows, strict=True)
        ],
        fontsize=7,
    )
    ax.set_ylabel("seconds until affected jobs run again")


def _memory(ax: Any, rows: list[dict[str, Any]]) -> None:
    for row in rows:
        series = row.get("rss_series") or []
        ax.plot([s[0] for s in series], [s[1] / 2**20 for s in series], label=row["variant"])
    ax.set_xlabel("seconds after the leasekeeper started")
    ax.set_ylabel("leasekeeper RSS, MiB")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
