"""Per-partition offsets below every record a relay batch may write (pure).

Stored before a batch is produced, fresh for that batch: the current ends of every
partition of the topics the batch writes to, and nothing else. After a crash, the
records the batch did write are at or above these offsets, so the next relay reads
only from there to find them, and only the records written while that one batch
was in flight. Marks kept across batches would go stale on a shared topic (a delay
tier every leasekeeper writes, a class partition the relay's tenants rarely hash
to) and recovery would read weeks of other producers' records; a partition added
to a topic since an older mark would not be read at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Marks"]


@dataclass(frozen=True, kw_only=True)
class Marks:
    positions: Mapping[str, Mapping[int, int]] = field(default_factory=dict)

    def has(self, topic: str) -> bool:
        return topic in self.positions

    def with_topic(self, topic: str, ends: Mapping[int, int]) -> Marks:
        """``topic`` marked at its partitions' current ends (every partition)."""
        return Marks(positions={**self.positions, topic: dict(ends)})

    def to_json(self) -> str:
        return json.dumps(
            {t: {str(p): o for p, o in parts.items()} for t, parts in self.positions.items()}
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, int]]) -> Marks:
        return cls(
            positions={t: {int(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
        )
