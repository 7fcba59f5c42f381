"""The overflow lane's policy: which tenant is in overflow on which partition.

A flooding tenant's backlog in partition p would hold back every other tenant of
p (they are read behind it). When a full window pauses p and one tenant holds
more than its share of p's slice of the window, that tenant goes *into overflow
on p*: its ready jobs from p, and every later job of it fetched from p, are
copied to ``jobs.Q.overflow`` partition p and resolved once the copy is durable,
so p's commit and fetch move on to the other tenants. The overflow topic is
fetched and dispatched like a class topic, at the tenant's weight.

While a tenant is in overflow on p its newer jobs follow the older ones there,
so its jobs still start in enqueue order. It comes back once the overflow
partition's committed offset (read from Kafka: the owners of ``jobs.Q`` p and of
``jobs.Q.overflow`` p may differ) has passed the last record moved for it and no
copy of it is on its way. The entries are the durable state: they travel in the
commit metadata of p (``encode``/``decode``) and in the lease store.

Pure data and decisions; no Kafka, no clock. The engine's lock guards it.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from leasekeeper.core.leases import TopicPart

# Separates the overflow section from the progress in the commit metadata.
SECTION = "|ov1:"
# Characters the overflow section may take of the commit metadata (the progress,
# up to ~2,700, takes the rest of the broker's 4,096): a tenant that would not fit
# does not enter overflow.
SECTION_BUDGET = 600
# Tenants in overflow on one partition at most (the metadata must stay small).
MAX_TENANTS = 16
# A tenant holding more than this share of its partition's slice of a full window
# goes to overflow (half: a tenant can only dominate when it holds the majority).
DEFAULT_SHARE = 0.5
# Fewer ready jobs than this never count as a flood, unless the slice itself is
# no larger (then a tenant holding the whole slice of a paused partition floods it).
MIN_FLOOD = 4


@dataclass(kw_only=True)
class OverflowEntry:
    """One tenant in overflow on one partition. ``first``/``last``: offsets in the
    overflow partition of the first and last record moved (-1: none delivered yet);
    ``in_flight``: copies decided and not delivered or dropped yet."""

    first: int = -1
    last: int = -1
    in_flight: int = 0

    def delivered(self, offset: int) -> None:
        if offset >= 0:
            self.first = offset if self.first < 0 else min(self.first, offset)
            self.last = max(self.last, offset)


@dataclass(kw_only=True)
class OverflowLane:
    """Entries per source partition, and the overflow partitions' committed offsets."""

    share: float = DEFAULT_SHARE
    entries: dict[TopicPart, dict[str, OverflowEntry]] = field(default_factory=dict)
    # Overflow partition number → the group's committed offset there (from Kafka).
    committed: dict[int, int] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.share > 0

    def follows(self, tp: TopicPart, tenant: str) -> bool:
        """Whether ``tenant``'s jobs fetched from ``tp`` go to overflow."""
        entries = self.entries.get(tp)
        return entries is not None and tenant in entries

    def flooders(self, tp: TopicPart, held: Mapping[str, int], slice_: int) -> list[str]:
        """The tenants of ``tp`` (jobs held per tenant) that enter overflow now: those
        holding more than their share of the partition's slice of the window (or of
        what the paused partition holds), while there is room for them in the entries
        and in the metadata."""
        if not self.enabled:
            return []
        # Below the slice in any case: a partition is paused holding its slice, and a
        # tenant holding all of it must be able to flood it however small the slice.
        # And below the share of what the partition holds: two tenants splitting a
        # small slice (2 and 1 of 3) would otherwise both stay under the limit, and
        # the partition paused.
        floor = MIN_FLOOD if slice_ > MIN_FLOOD else 0
        total = sum(held.values())
        limit = min(
            max(floor, int(slice_ * self.share)),
            max(0, slice_ - 1),
            max(floor, int(total * self.share)),
        )
        found = sorted((t for t, n in held.items() if n > limit), key=lambda t: -held[t])
        return [t for t in found if not self.follows(tp, t) and self._fits(tp, t)]

    def _fits(self, tp: TopicPart, tenant: str) -> bool:
        entries = dict(self.entries.get(tp, {}))
        if len(entries) >= MAX_TENANTS:
            return False
        entries[tenant] = OverflowEntry(first=2**40, last=2**40)  # the widest it can be
        return len(encode(entries)) <= SECTION_BUDGET

    def enter(self, tp: TopicPart, tenant: str) -> None:
        self.entries.setdefault(tp, {}).setdefault(tenant, OverflowEntry())

    def decided(self, tp: TopicPart, tenant: str, delta: int) -> None:
        """A copy of ``tenant``'s job from ``tp`` was decided (+1) or dropped (-1)."""
        entry = self.entries.get(tp, {}).get(tenant)
        if entry is not None:
            entry.in_flight = max(0, entry.in_flight + delta)

    def delivered(self, tp: TopicPart, tenant: str, offset: int) -> None:
        """A copy is durable at ``offset`` of the overflow partition (-1: unknown)."""
        entry = self.entries.get(tp, {}).get(tenant)
        if entry is not None:
            entry.in_flight = max(0, entry.in_flight - 1)
            entry.delivered(offset)

    def restore(self, tp: TopicPart, entries: Mapping[str, OverflowEntry]) -> None:
        """Entries recalled for a partition being assigned (store and metadata)."""
        if entries:
            self.entries[tp] = {t: OverflowEntry(first=e.first, last=e.last)
                                for t, e in entries.items()}  # fmt: skip
        else:
            self.entries.pop(tp, None)

    def forget(self, tp: TopicPart) -> None:
        self.entries.pop(tp, None)

    def watched(self) -> set[int]:
        """Overflow partitions whose committed offset the entries need."""
        return {tp.partition for tp, entries in self.entries.items() if entries}

    def clear_passed(self) -> dict[TopicPart, list[str]]:
        """Clear the tenants whose overflow is done: nothing on its way, and the overflow
        partition's commit past the last record moved (so every job moved was run,
        retried or dead-lettered, and the tenant's next job cannot overtake one);
        returns them by partition."""
        cleared: dict[TopicPart, list[str]] = {}
        for tp, entries in list(self.entries.items()):
            committed = self.committed.get(tp.partition)
            if committed is None:
                continue
            done = [t for t, e in entries.items() if e.in_flight == 0 and committed > e.last]
            for tenant in done:
                del entries[tenant]
            if done:
                cleared[tp] = done
            if not entries:
                del self.entries[tp]
        return cleared

    def backlog(self) -> dict[str, int]:
        """Per tenant, its jobs in overflow not yet passed by the commit there: exact
        when one tenant is in overflow on a partition, an upper bound when several
        share it (their records interleave)."""
        found: dict[str, int] = {}
        for tp, entries in self.entries.items():
            committed = max(0, self.committed.get(tp.partition, 0))
            for tenant, e in entries.items():
                moved = 0 if e.last < 0 else e.last + 1 - max(e.first, committed)
                found[tenant] = found.get(tenant, 0) + max(0, moved) + e.in_flight
        return found

    def section(self, tp: TopicPart) -> str:
        """The overflow section of ``tp``'s commit metadata ("" when none)."""
        entries = self.entries.get(tp)
        return SECTION + encode(entries) if entries else ""


def encode(entries: Mapping[str, OverflowEntry]) -> str:
    """Entries as compact text: zlib-compressed JSON, URL-safe base64."""
    rows = [[t, e.first, e.last] for t, e in sorted(entries.items())]
    raw = json.dumps(rows, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def decode(text: str) -> dict[str, OverflowEntry]:
    """The entries in ``text`` (empty when malformed: the lane starts afresh)."""
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        rows = json.loads(raw)
        return {str(t): OverflowEntry(first=int(f), last=int(la)) for t, f, la in rows}
    except (ValueError, TypeError, zlib.error):
        return {}


def split_metadata(metadata: str | None) -> tuple[str, dict[str, OverflowEntry]]:
    """Commit metadata → (the progress part, the overflow entries)."""
    text = metadata or ""
    progress, sep, section = text.partition(SECTION)
    return progress, (decode(section) if sep else {})


def merge(*sources: Mapping[str, OverflowEntry]) -> dict[str, OverflowEntry]:
    """Entries known from several places (the store, the commit metadata): a tenant in
    any is in overflow; the widest range of records moved is kept."""
    merged: dict[str, OverflowEntry] = {}
    for source in sources:
        for tenant, entry in source.items():
            known = merged.setdefault(tenant, OverflowEntry())
            known.delivered(entry.first)
            known.delivered(entry.last)
    return merged
