"""The recently active keys a map keeps after they go idle, and no more.

Tenant ids, ordering keys and job ids are unbounded: a SaaS queue may see a new
tenant every minute for months. A map keyed by them that only ever adds holds
every key the process has seen, so its memory follows uptime instead of what is
active. Each such map keeps its active keys (ready jobs, a bucket, a parked job
still due) and, once a key goes idle, remembers it here; past ``limit`` idle keys
the oldest is handed back so its owner can drop its entries. A key that comes back
soon keeps what was learned of it (a tenant's mean cost, its virtual clock); one
that comes back after more than ``limit`` others went idle starts afresh, which
for every map that uses this is what a new key gets.
"""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")

# Idle keys remembered beyond the active set, per map.
RECENT_LIMIT = 10_000


class RecentKeys(Generic[K]):
    """Idle keys in the order they went idle, at most ``limit`` of them."""

    def __init__(self, limit: int = RECENT_LIMIT) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self._limit = limit
        self._keys: dict[K, None] = {}

    def idle(self, key: K) -> list[K]:
        """``key`` went idle (again): it becomes the most recent. Returns the keys
        evicted to stay within the limit, whose entries the caller drops."""
        self._keys.pop(key, None)
        self._keys[key] = None
        evicted: list[K] = []
        while len(self._keys) > self._limit:
            oldest = next(iter(self._keys))
            del self._keys[oldest]
            evicted.append(oldest)
        return evicted

    def active(self, key: K) -> None:
        """``key`` is active again: its owner keeps its entries as long as it is."""
        self._keys.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)
