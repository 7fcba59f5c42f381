"""Reading past a flood: a flooding tenant's records stay in Kafka while the others
of its partition are read, and are handed back as its share of the window frees.

One tenant's backlog on partition p holds back every other tenant of p: they are
read behind it, and a full window pauses p. When a full window pauses p and one
tenant T holds more than half of p's slice of the window, T is *deferred on p*:
each later record of T fetched from p is tracked (unresolved, so the commit stays
at the first one and nothing is lost) but only its offset is kept, except those
with an ordering key (their key's line keeps their order, and must see them). The fetch of p
goes on, and p's other tenants reach the window at read speed. A second reader of
p (``reader.py``) reads the deferred records again from Kafka, in order, and hands
them back (``FetchPort.offer_again``) while T holds less than half of p's slice.
Once none is left, T is read as before. While T is deferred, every later record of
T on p is deferred too, so T's jobs still start in enqueue order.

Nothing is copied and nothing is written, and a deferred record is not even read:
the fetch knows it by its key (the tenant) and keeps its offset (``FetchHold``).
The price is memory (an int per deferred record) and reading T's records twice.
Pure decisions and state; no Kafka. The engine's lock guards it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from leasekeeper.core.hooks import Offer
from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.window import ReadyWindow

__all__ = ["Deferred", "FloodDeferral", "Reading"]

# A tenant holding more than this share of its partition's slice of a full window is
# deferred; it is handed its records back while it holds less (half: a tenant only
# dominates a partition when it holds the majority of its slice).
SHARE = 0.5
# Fewer ready jobs than this never count as a flood (a tiny window's slice aside).
MIN_FLOOD = 4


@dataclass(kw_only=True)
class Deferred:
    """One tenant deferred on one partition: the offsets it waits at, in order."""

    tenant: str
    generation: int
    since_ms: int
    key: bytes = b""  # its records' key (the tenant, encoded)
    offsets: deque[int] = field(default_factory=deque)
    deferred: int = 0  # records deferred since it began
    read_past: int = 0  # other tenants' records fetched meanwhile
    returning: int = -1  # the offset being handed back now (the hook passes it)


@dataclass(frozen=True, kw_only=True)
class Reading:
    """What a reader of a deferred partition needs: where to read from, and how many
    records it may hand back now (``room``: the tenant's free share of the window)."""

    tp: TopicPart
    tenant: str
    key: bytes
    generation: int
    first: int
    room: int


class FloodDeferral:
    """``OfferHook`` and ``PartitionHook`` of the deferral, and its trigger."""

    def __init__(
        self,
        *,
        book: PartitionBook,
        window: ReadyWindow,
        now_ms: Callable[[], int],
        enabled: bool = True,
    ) -> None:
        self._book = book
        self._window = window
        self._now_ms = now_ms
        self.enabled = enabled
        self.entries: dict[TopicPart, Deferred] = {}
        self.ended = 0  # deferrals that ran out (every record handed back)

    # -- the trigger ---------------------------------------------------------------

    def floods(self, over: Iterable[TopicPart], slice_: int) -> set[TopicPart]:
        """Of the ready (class) partitions a full window pauses (``over``; ``slice_``
        records of the window each), defer the tenant flooding each; return those that
        may be fetched on: deferring a tenant, and its other tenants under their slice."""
        if not self.enabled:
            return set()
        reading: set[TopicPart] = set()
        for tp in over:
            state = self._book.parts.get(tp)
            if state is None or state.draining:
                continue
            held = self._window.held_by_tenant(tp)
            entry = self.entries.get(tp)
            if entry is None:
                tenant = _flooder(held, slice_)
                if tenant is None:
                    continue
                entry = self.entries[tp] = Deferred(tenant=tenant, key=tenant.encode(),
                                                    generation=state.generation,
                                                    since_ms=self._now_ms())  # fmt: skip
            others = sum(held.values()) - held.get(entry.tenant, 0)
            if others < slice_:
                reading.add(tp)
        return reading

    def behind(self, tp: TopicPart, key: bytes) -> bool:
        """The second trigger: the leasekeeper reads ``tp`` slower than jobs arrive (its
        fetches have been full for a while) and the tenant keyed ``key`` fills most of
        them. Deferred whatever the window holds; returns whether a deferral began."""
        state = self._book.parts.get(tp)
        if not self.enabled or tp in self.entries or state is None or state.draining:
            return False
        self.entries[tp] = Deferred(tenant=key.decode(errors="replace"), key=key,
                                    generation=state.generation,
                                    since_ms=self._now_ms())  # fmt: skip
        return True

    # -- OfferHook -----------------------------------------------------------------

    def offered(self, pending: Pending) -> Offer:
        entry = self.entries.get(pending.tp)
        if entry is None:
            return Offer.PASS
        job = pending.job
        if job.tenant_id != entry.tenant:
            entry.read_past += 1
            return Offer.PASS
        if pending.offset == entry.returning or job.ordering_key is not None:
            return Offer.PASS
        entry.offsets.append(pending.offset)
        entry.deferred += 1
        return Offer.TAKEN

    # -- FetchHold: the same, for the records the fetch does not read -------------

    def holding(self) -> dict[TopicPart, bytes]:
        return {tp: entry.key for tp, entry in self.entries.items()}

    def held(self, tp: TopicPart, offset: int, key: bytes) -> None:
        entry = self.entries.get(tp)
        if entry is None:
            # The deferral ended since the fetch asked (the partition was assigned
            # again inside the fetch): the record is tracked and unread, so the tenant
            # is deferred again, from it.
            state = self._book.parts[tp]  # tracked just now: the partition is here
            entry = self.entries[tp] = Deferred(tenant=key.decode(errors="replace"), key=key,
                                                generation=state.generation,
                                                since_ms=self._now_ms())  # fmt: skip
        elif entry.key != key:  # never: only ``floods`` starts one, before the fetch
            raise RuntimeError(f"{tp.topic}/{tp.partition}@{offset} held for another tenant")
        entry.offsets.append(offset)
        entry.deferred += 1

    def taken(self, tp: TopicPart, offset: int) -> bool:
        """Whether ``offset`` of ``tp``, read again, is the next record deferred there:
        then it is handed back (the hook passes it), and the tenant's deferral ends
        with its last one."""
        entry = self.entries.get(tp)
        if entry is None or not entry.offsets or entry.offsets[0] != offset:
            return False
        entry.offsets.popleft()
        entry.returning = offset
        if not entry.offsets:
            del self.entries[tp]
            self.ended += 1
        return True

    # -- PartitionHook -------------------------------------------------------------

    def assigned(self, tp: TopicPart, metadata: str | None) -> None:
        self.entries.pop(tp, None)  # read afresh from the commit

    def revoked(self, tp: TopicPart, *, held: bool) -> None:
        self.entries.pop(tp, None)  # the next owner reads them from the commit

    # -- the readers' side ---------------------------------------------------------

    def reading(self, slice_: int, window_records: int) -> list[Reading]:
        """The deferred partitions with records to hand back, and how many each may
        hand back now: while the tenant holds less than a quarter of the window (or
        half its partition's slice, when more). Not just the slice: with dozens of
        partitions sharing the window, a slice is too few jobs to keep a fleet of
        workers busy, and the tenant's jobs here no longer hold its partition back
        (its other tenants are read on while they hold less than their slice)."""
        found = []
        # Shared among the deferred partitions: what they hand back stays within the
        # window's bound (and within its room, as any fetch does).
        target = max(int(slice_ * SHARE), window_records // (4 * max(1, len(self.entries))))
        free = self._window.room()
        for tp, entry in list(self.entries.items()):
            state = self._book.parts.get(tp)
            held = self._window.held_by_tenant(tp).get(entry.tenant, 0)
            if not entry.offsets:
                if held <= int(slice_ * SHARE):  # the flood is over: nothing deferred
                    del self.entries[tp]
                    self.ended += 1
                continue
            if state is None or state.draining or state.generation != entry.generation:
                continue
            room = max(0, min(target - held, free))
            free -= room
            found.append(Reading(tp=tp, tenant=entry.tenant, key=entry.key,
                                 generation=entry.generation, first=entry.offsets[0],
                                 room=room))  # fmt: skip
        return found

    def gone(self, tp: TopicPart, offset: int) -> bool:
        """The next deferred record of ``tp``, ``offset``, is no longer in Kafka (the
        reader read past where it was: retention or compaction deleted it, as a
        consumer resetting to the earliest offset would skip it). It is let go."""
        entry = self.entries.get(tp)
        if entry is None or not entry.offsets or entry.offsets[0] != offset:
            return False
        entry.offsets.popleft()
        if not entry.offsets:
            del self.entries[tp]
            self.ended += 1
        return True

    def deferring(self) -> set[TopicPart]:
        return set(self.entries)


def _flooder(held: Mapping[str, int], slice_: int) -> str | None:
    """The tenant holding more than ``SHARE`` of the slice (of what the partition holds,
    when less), if one does."""
    if not held:
        return None
    tenant, most = max(held.items(), key=lambda item: item[1])
    floor = MIN_FLOOD if slice_ > MIN_FLOOD else 1
    limit = max(floor, int(min(slice_, sum(held.values())) * SHARE))
    return tenant if most > limit else None
