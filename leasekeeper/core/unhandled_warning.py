"""The warning for ready jobs whose type no connected worker runs.

Such jobs wait quietly for the unknown-type grace and then go to the DLQ; nothing
else says why a queue stopped moving. One sentence, built here from the snapshot's
plain form, is what the leasekeeper logs, ``inspect`` prints and the dashboard
shows, so the three cannot drift apart. This module imports nothing heavy: the
``inspect`` client and the dashboard read it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobcore.terminal_text import escaped

# A type waits this long before it is warned about: a worker started a few seconds
# after another (a deploy in any order) is not worth a warning.
WARN_AFTER_MS = 30_000
# While the wait lasts, the warning is logged again this often.
REPEAT_MS = 300_000


@dataclass(frozen=True, kw_only=True)
class UnhandledWait:
    """Ready jobs of one type that no connected worker runs (``handled``: the types
    the connected workers do run); they go to the DLQ at ``dead_at_ms``."""

    type: str
    queue: str
    topics: tuple[str, ...]
    jobs: int
    since_ms: int
    dead_at_ms: int
    handled: tuple[str, ...]


def unhandled_text(wait: Mapping[str, Any], now_ms: int) -> str:
    """The warning as one plain sentence (callers escape it for their medium)."""
    job_type, jobs = wait["type"], int(wait["jobs"])
    queue = wait.get("queue") or ", ".join(wait.get("topics") or ()) or "?"
    handled = ", ".join(wait.get("handled") or ()) or "none"
    since, dead_at = int(wait["since_ms"]), int(wait["dead_at_ms"])
    return (
        f"{jobs} {'job' if jobs == 1 else 'jobs'} of type {job_type!r} in queue {queue} "
        f"waiting since {_clock(since)} ({_span(now_ms - since)}): no connected worker runs "
        f"that type (they run: {handled}); they go to the DLQ as UnknownJobType "
        f"{'now' if dead_at <= now_ms else f'at {_clock(dead_at)}'}. Start a worker that "
        f"registers {job_type!r}, or check the type's spelling in the producer and the worker"
    )


def unhandled_lines(snapshot: Mapping[str, Any], now_ms: int) -> list[str]:
    """``inspect``'s lines, first after the headline: nothing from an older leasekeeper."""
    return [
        f"[bold yellow]unhandled job type[/] {escaped(unhandled_text(wait, now_ms))}"
        for wait in snapshot.get("unhandled") or ()
    ]


def _clock(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _span(ms: int) -> str:
    seconds = max(0, ms // 1000)
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"
