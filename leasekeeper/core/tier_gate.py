"""Holds each delay-tier partition until its head record is due.

A tier topic ``jobs.Q.retry.<tier>`` (``jobs.Q.<class>.retry.<tier>`` for the
classes other than the default) releases a record at
``min(run_at, produced_at + tier)`` (see ``jobcore.delay_tiers``), which grows
along a partition, so only the head matters: when it is not due the loop seeks
back to it and pauses the partition until then. No busy polling, and the job
stays in Kafka (not in local state) while it waits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from jobcore.delay_tiers import DelayTiers
from jobcore.topics import DEFAULT_CLASS, QueueTopics
from leasekeeper.core.leases import TopicPart


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TierGate:
    def __init__(
        self,
        tiers: DelayTiers,
        topics: QueueTopics,
        clock_ms: Callable[[], int] = wall_ms,
        classes: Sequence[str] = (DEFAULT_CLASS,),
    ) -> None:
        self.tiers = tiers
        # Every class's tiers: each is consumed, and held by its own head.
        found = tiers.class_topics(topics, classes)
        self._tier_of = {topic: name for _, name, topic in found}
        self._class_of = {topic: klass for klass, _, topic in found}
        self._clock_ms = clock_ms
        self._held: dict[TopicPart, int] = {}

    @property
    def topics(self) -> list[str]:
        return list(self._tier_of)

    def tier_of(self, topic: str) -> str | None:
        return self._tier_of.get(topic)

    def share_unit(self, tp: TopicPart) -> object:
        """What shares one share of a full window with ``tp``: the tier partitions of
        one class and partition number share one (there are several tiers per class,
        mostly idle, and counting each would shrink every partition's share by that
        many); any other partition is a unit of its own."""
        klass = self._class_of.get(tp.topic)
        return tp if klass is None else ("tiers", klass, tp.partition)

    def release_at_ms(self, tier: str, produced_ms: int, run_at_ms: int) -> int:
        return self.tiers.release_at_ms(tier=tier, produced_at_ms=produced_ms, run_at_ms=run_at_ms)

    def hold(self, tp: TopicPart, release_at_ms: int) -> None:
        self._held[tp] = release_at_ms

    def is_held(self, tp: TopicPart) -> bool:
        return tp in self._held

    @property
    def holding(self) -> Mapping[TopicPart, int]:
        """The held partitions, live (the fetch's fast path tests membership)."""
        return self._held

    def now_ms(self) -> int:
        """The gate's clock (epoch ms): every due time of a delay tier is read on it."""
        return self._clock_ms()

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
