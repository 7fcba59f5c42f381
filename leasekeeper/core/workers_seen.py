"""Which job types the workers that claimed lately can run.

A worker lists its job types in every claim (empty: any type, as workers did
before the list existed). A job whose type none of them runs waits instead of
bouncing between workers that would release it; after a grace it dead-letters
as ``UnknownJobType`` (see ``leasekeeper.core.unhandled``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class WorkerSeen:
    types: frozenset[str]
    seen_ms: int


class ConnectedWorkers:
    """Workers count as connected for ``forget_after_ms`` after their last claim."""

    def __init__(self, *, forget_after_ms: int) -> None:
        self._forget_after_ms = forget_after_ms
        self._workers: dict[str, WorkerSeen] = {}

    def saw(self, worker: str, types: frozenset[str], now_ms: int) -> None:
        self._workers[worker] = WorkerSeen(types=types, seen_ms=now_ms)

    def handled(self, now_ms: int) -> frozenset[str] | None:
        """The types some connected worker runs; None when no type can be unhandled:
        no worker is connected (an outage, not an unknown type), or one takes any."""
        self._forget(now_ms)
        if not self._workers or any(not w.types for w in self._workers.values()):
            return None
        return frozenset().union(*(w.types for w in self._workers.values()))

    def snapshot(self, now_ms: int) -> dict[str, list[str]]:
        """Worker id → the types it runs (empty: any), for ``inspect``."""
        self._forget(now_ms)
        return {worker: sorted(seen.types) for worker, seen in self._workers.items()}

    def _forget(self, now_ms: int) -> None:
        cutoff = now_ms - self._forget_after_ms
        for worker in [w for w, seen in self._workers.items() if seen.seen_ms < cutoff]:
            del self._workers[worker]
