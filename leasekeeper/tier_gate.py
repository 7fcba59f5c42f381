"""Holds each delay-tier partition until its head record is due.

A tier topic ``jobs.Q.retry.<tier>`` releases a record at
``min(run_at, produced_at + tier)`` (see ``jobcore.delay_tiers``), which grows
along a partition, so only the head matters: when it is not due the loop seeks
back to it and pauses the partition until then. No busy polling, and the job
stays in Kafka (not in local state) while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import QueueTopics
from leasekeeper.leases import TopicPart


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TierGate:
    def __init__(
        self, tiers: DelayTiers, topics: QueueTopics, clock_ms: Callable[[], int] = wall_ms
    ) -> None:
        self.tiers = tiers
        self._tier_of = {topics.retry(name): name for name in tiers.names}
        self._clock_ms = clock_ms
        self._held: dict[TopicPart, int] = {}

    @property
    def topics(self) -> list[str]:
        return list(self._tier_of)

    def tier_of(self, topic: str) -> str | None:
        return self._tier_of.get(topic)

    def release_at_ms(self, tier: str, produced_ms: int, run_at_ms: int) -> int:
        return self.tiers.release_at_ms(tier=tier, produced_at_ms=produced_ms, run_at_ms=run_at_ms)

    def hold(self, tp: TopicPart, release_at_ms: int) -> None:
        self._held[tp] = release_at_ms

    def is_held(self, tp: TopicPart) -> bool:
        return tp in self._held

    def release_due(self) -> None:
        """Forget the holds whose time came: those partitions may be fetched again."""
        now = self._clock_ms()
        for tp in [tp for tp, at in self._held.items() if at <= now]:
            del self._held[tp]

    def held(self) -> set[TopicPart]:
        return set(self._held)

    def forget(self, tps: set[TopicPart]) -> None:
        for tp in tps:
            self._held.pop(tp, None)

    def snapshot(self) -> dict[str, int]:
        """Held tier partitions and when each head is due (epoch ms), for inspect."""
        return {f"{tp.topic}/{tp.partition}": at for tp, at in sorted(self._held.items(), key=str)}
