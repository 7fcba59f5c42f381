"""Per-partition offsets below every record a relay batch may write (pure).

Stored before a batch is produced; after a crash, the records the batch did write
are at or above these offsets, so the next relay reads only from there to find
them. A lower bound is enough, so a partition the last batch did not write to
keeps its older mark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from producer.api import Delivered

__all__ = ["Marks"]


@dataclass(frozen=True, kw_only=True)
class Marks:
    positions: Mapping[str, Mapping[int, int]] = field(default_factory=dict)

    def has(self, topic: str) -> bool:
        return topic in self.positions

    def with_topic(self, topic: str, ends: Mapping[int, int]) -> Marks:
        """A topic seen for the first time, marked at its partitions' current ends."""
        return Marks(positions={**self.positions, topic: dict(ends)})

    def advance(self, delivered: Iterable[Delivered]) -> Marks:
        """Past the records a finished batch wrote (never backwards)."""
        positions = {topic: dict(parts) for topic, parts in self.positions.items()}
        for d in delivered:
            parts = positions.setdefault(d.topic, {})
            parts[d.partition] = max(parts.get(d.partition, 0), d.offset + 1)
        return Marks(positions=positions)

    def to_json(self) -> str:
        return json.dumps(
            {t: {str(p): o for p, o in parts.items()} for t, parts in self.positions.items()}
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, int]]) -> Marks:
        return cls(
            positions={t: {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
        )
