"""``inspect`` lines for the rate limiters and the queue's dead letters."""

from __future__ import annotations

from typing import Any

from jobcore.terminal_text import escaped

# Tenant limiters listed before "… N more": those with the most jobs waiting.
TENANT_LIMITERS_SHOWN = 10


def limit_lines(snapshot: dict[str, Any], now_ms: int) -> list[str]:
    """One line per limiter (rate here, tokens, waiting, parked) and one for the DLQ;
    nothing when no limit is set and the DLQ figures are not known."""
    lines = []
    limits = snapshot.get("limits")
    if limits:
        views = limits["limiters"]
        tenants = sorted((v for v in views if v["kind"] == "tenant"), key=lambda v: -v["waiting"])
        shown = [v for v in views if v["kind"] == "type"] + tenants[:TENANT_LIMITERS_SHOWN]
        lines.append(f"[bold]rate limits[/] (this leasekeeper's share {limits['share']:.0%})")
        lines += [
            f"  {v['kind']} {escaped(v['key'])}: limit {v['limit']}, here {v['rate_per_s']:.3g}/s, "
            f"tokens {v['tokens']:.1f}, waiting {v['waiting']}, parked {v['parked']}"
            for v in shown
        ]
        if len(tenants) > TENANT_LIMITERS_SHOWN:
            lines.append(f"  … {len(tenants) - TENANT_LIMITERS_SHOWN} more tenant limiters")
    dead = snapshot.get("dead_letters")
    if dead:
        newest = dead.get("newest_ms")
        age = "" if newest is None else f", newest {max(0, now_ms - newest) / 1000:.0f}s ago"
        lines.append(f"[bold]dead letters[/] {dead['depth']}{age}")
    return lines
