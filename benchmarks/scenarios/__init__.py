"""One module per scenario of the issue; each ``run(ctx)`` returns a JSON-able result.

A result always has ``scenario``, ``title``, ``status`` ("ok", "skipped: why"
or "error: why"), ``settings`` and ``rows``; scenarios that compare add
``ratios``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from benchmarks.context import BenchContext

Scenario = Callable[[BenchContext], dict[str, Any]]


def registry() -> dict[str, Scenario]:
    """Imported lazily so ``--scenario drain`` does not import Celery or psycopg."""
    from benchmarks.scenarios import (
        drain,
        latency,
        memory,
        micro,
        noisy,
        peers,
        raw,
        recovery,
        share,
    )

    return {
        "drain": drain.run,
        "raw": raw.run,
        "share": share.run,
        "peers": peers.run,
        "latency": latency.run,
        "recovery": recovery.run,
        "memory": memory.run,
        "noisy": noisy.run,
        "micro": micro.run,
    }


def result(
    scenario: str, title: str, settings: dict[str, Any], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "title": title,
        "status": "ok",
        "settings": settings,
        "rows": rows,
    }


def ours_best(ctx: BenchContext) -> dict[str, Any] | None:
    """Our fastest pinned no-op drain row: from this run, else from the results directory."""
    drain = ctx.results.get("drain")
    if drain is None:
        path = ctx.out_dir / "drain.json"
        drain = json.loads(path.read_text()) if path.exists() else None
    rows = [
        r for r in (drain or {}).get("rows", []) if r.get("jobs_per_s") and r.get("pinned", True)
    ]
    return max(rows, key=lambda r: r["jobs_per_s"]) if rows else None


def ratio(ours: float | None, other: float | None) -> float | None:
    """ours / other, rounded; None when either side is missing."""
    if not ours or not other:
        return None
    return round(ours / other, 3)
