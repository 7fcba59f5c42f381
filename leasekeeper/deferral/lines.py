"""``inspect`` lines for the floods a leasekeeper reads past (``floods.py``)."""

from __future__ import annotations

from typing import Any

from jobcore.terminal_text import escaped


def flood_lines(snapshot: dict[str, Any], now_ms: int) -> list[str]:
    """One line per flood read past: whose, where, since when, how far; nothing when
    there is none (or the leasekeeper is older than the deferral)."""
    return [
        f"[bold]reading past a flood[/] of {escaped(f['tenant'])} on "
        f"{escaped(f['topic'])}/{f['partition']} for {max(0, now_ms - f['since_ms']) / 1000:.0f}s: "
        f"{f['waiting']} of its jobs wait in Kafka ({f['deferred']} deferred so far), "
        f"{f['read_past']} records of other tenants read past it"
        for f in snapshot.get("floods") or ()
    ]
