"""Which cluster, consumer group and topics a state directory belongs to.

The lease store remembers resolutions by (topic name, partition, offset). A
topic deleted and created again, another cluster behind the same address, or
another group reuses those names and offsets for different jobs, and a stale
store would then skip new jobs as "already acked". So the store records the
cluster id, the group id and each consumed topic's id (a UUID Kafka never
reuses) on first start, and a later start compares them before any job is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from leasekeeper.core.store import LeaseStore

META_KEY = "identity"


@dataclass(frozen=True, kw_only=True)
class StateIdentity:
    cluster_id: str
    group_id: str
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_ids", dict(self.topic_ids))

    def encode(self) -> bytes:
        record = {"v": 1, "cluster": self.cluster_id, "group": self.group_id}
        return json.dumps({**record, "topics": dict(sorted(self.topic_ids.items()))}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> StateIdentity:
        record = json.loads(raw)
        return cls(
            cluster_id=record["cluster"], group_id=record["group"], topic_ids=record["topics"]
        )

    def differences(self, found: StateIdentity) -> list[str]:
        """What differs, recorded vs found; topics only one side knows are not a difference
        (a tier added or dropped by configuration has no stale state to misread)."""
        diffs = []
        if self.cluster_id != found.cluster_id:
            diffs.append(f"cluster id recorded {self.cluster_id}, found {found.cluster_id}")
        if self.group_id != found.group_id:
            diffs.append(f"group id recorded {self.group_id}, found {found.group_id}")
        for topic in sorted(self.topic_ids.keys() & found.topic_ids.keys()):
            was, now = self.topic_ids[topic], found.topic_ids[topic]
            if was != now:
                diffs.append(f"topic {topic} id recorded {was}, found {now}")
        return diffs

    def merged(self, found: StateIdentity) -> StateIdentity:
        """The record after a matching start: topics seen for the first time are added."""
        return StateIdentity(
            cluster_id=self.cluster_id,
            group_id=self.group_id,
            topic_ids={**self.topic_ids, **found.topic_ids},
        )


class StateCheck(StrEnum):
    """What the identity check did at start."""

    RECORDED = "recorded"  # a new (or pre-identity) store: the identity is now recorded
    MATCHED = "matched"
    RESET = "reset"  # --reset-state wiped a store of another cluster, group or topic


class StateMismatch(Exception):
    """The state directory belongs to another cluster, group or topic; the message says
    which and how to proceed."""

    def __init__(self, state_dir: Path, differences: list[str]) -> None:
        super().__init__(
            f"state dir {state_dir} belongs to another cluster, group or topic "
            f"({_gist(differences)})\n"
            "start with --reset-state to wipe it, or use another --state-dir"
        )
        self.differences = differences


def _gist(differences: list[str]) -> str:
    """The first difference and how many more; with another cluster, that alone. A
    reset local Kafka changes every topic's id with its own, and listing them all
    buried the fix under a screenful of ids."""
    if differences[0].startswith("cluster id"):
        return differences[0]
    more = len(differences) - 1
    return differences[0] + (f", and {more} more" if more else "")


def check_identity(
    store: LeaseStore, found: StateIdentity, *, state_dir: Path, reset: bool
) -> StateCheck:
    """Compare ``found`` with what ``store`` recorded; raise StateMismatch, or wipe
    the store when ``reset``. Runs before any partition's state is loaded."""
    raw = store.meta(META_KEY)
    if raw is None:
        store.put_meta(META_KEY, found.encode())
        return StateCheck.RECORDED
    recorded = StateIdentity.decode(raw)
    differences = recorded.differences(found)
    if not differences:
        store.put_meta(META_KEY, recorded.merged(found).encode())
        return StateCheck.MATCHED
    if not reset:
        raise StateMismatch(state_dir, differences)
    store.clear()
    store.put_meta(META_KEY, found.encode())
    return StateCheck.RESET
