"""The partition book: what this leasekeeper knows of each partition it owns.

Per partition: the commit tracker (the lowest unresolved offset, invariant
"commit only past contiguous resolution"), what the store and the previous
owner's commit metadata say was resolved or claimed beyond the commit, the
leases in flight, the copies in flight, and the generation. Every assignment
mints a new generation; a lease, a delayed job or a copy carries the generation
it was made in, and anything that comes back with an older one (a delivery
report after the partition moved) is turned away: the next owner runs the job
again. The engine's lock guards the book.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from leasekeeper.core.commit_tracker import CommitTracker
from leasekeeper.core.context import Counters
from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.leases import Lease, Pending, TopicPart
from leasekeeper.core.offset_metadata import METADATA_LIMIT, Progress
from leasekeeper.core.offset_metadata import decode as decode_progress
from leasekeeper.core.offset_metadata import describe as describe_progress
from leasekeeper.core.store import LeaseStore, StoreBatch
from leasekeeper.core.store_values import LeaseRecord, Resolution

log = logging.getLogger(__name__)

V = TypeVar("V")

# Below this many bytes of metadata, none is written at all.
_SMALLEST_METADATA = 64


@dataclass(kw_only=True)
class PartitionState:
    tp: TopicPart
    generation: int
    tracker: CommitTracker
    resolved_before: dict[int, Resolution]
    claims: dict[int, int]
    stored_leases: dict[int, LeaseRecord]
    leases: dict[int, Lease] = field(default_factory=dict)
    unhandled_since: dict[int, int] = field(default_factory=dict)
    # Attempts given back to jobs whose lease expired before they started (the
    # bound of ``started_only``).
    refunds: dict[int, int] = field(default_factory=dict)
    # The lease token of each offset acked before a restart (from the store): the
    # same ack sent again is answered as applied.
    acked_tokens: dict[int, str] = field(default_factory=dict)
    committed: int = -1
    committed_metadata: str = ""
    copies_in_flight: int = 0
    draining: bool = False
    # Lowered when the broker refuses the metadata (offset.metadata.max.bytes < 4 KB).
    metadata_limit: int = METADATA_LIMIT
    # The tracker's resolutions that a commit Kafka accepted describes; the rest would
    # run again if the partition moved now (see ``PartitionBook.unsaved``).
    durable_resolutions: int = 0
    # (offset, metadata) sent in a commit → the resolutions it describes.
    commits_sent: dict[tuple[int, str], int] = field(default_factory=dict)
    # A delay tier's records up to this offset are noted by id (``Intake.note_delayed``).
    noted_through: int = -1
    # The tenants in overflow on this partition, as the commit metadata carries them
    # (see overflow_lane): appended to the progress, which gives it the room it takes.
    overflow_section: str = ""
    # Whether the last commit computed described every offset resolved beyond it
    # (``offset_metadata.describe``): only then may a fetch go past ``max_span``.
    described: bool = True


@dataclass(frozen=True, kw_only=True)
class Recalled:
    """What the store and the commit metadata know of a partition being assigned."""

    start: int
    resolved: dict[int, Resolution]
    claims: dict[int, int]
    leases: dict[int, LeaseRecord]
    unhandled: dict[int, int]
    refunds: dict[int, int]
    acked_tokens: dict[int, str]


class PartitionBook:
    def __init__(self, *, store: LeaseStore, counters: Counters, max_span: int) -> None:
        self._store = store
        self._counters = counters
        self._max_span = max_span
        self.parts: dict[TopicPart, PartitionState] = {}
        self._generation = 0
        # The smallest metadata limit a broker accepted so far: new partitions start there.
        self._metadata_limit = METADATA_LIMIT
        # What the loop checks on every turn, kept as it changes rather than found by
        # going over every partition (a queue has a hundred delay-tier partitions,
        # nearly all idle): the partitions a fetch took to ``max_span`` beyond their
        # commit (a span grows only by fetching), and those with copies on the way.
        self._spanning: set[TopicPart] = set()
        self.with_copies: set[TopicPart] = set()

    # -- assignment ---------------------------------------------------------

    def recall(self, tp: TopicPart, committed: int, metadata: str | None) -> Recalled:
        """Merge the store and the previous owner's metadata (whichever knows more).
        Reads the store: call it without the engine's lock.

        Claim counts take the larger of the two, unless Kafka's commit is the last one
        this store saw accepted: then the store is the newer of the two wherever it
        has a count, and an attempt it gave back since (a release, a refund) stays
        given back."""
        start = max(committed, 0)
        memory = self._store.load(tp.topic, tp.partition, start)
        moved = decode_progress(start, metadata)
        resolved = {o: Resolution.SKIPPED for o in moved.resolved}
        resolved.update(memory.resolved)
        ours = self._store.own_commit(tp.topic, tp.partition) == (committed, metadata or "")
        claims = dict(moved.claims)
        for offset, count in memory.claims.items():
            claims[offset] = count if ours else max(count, claims.get(offset, 0))
        return Recalled(
            start=start,
            resolved=resolved,
            claims=claims,
            leases=dict(memory.leases),
            unhandled=dict(memory.unhandled),
            refunds=dict(memory.refunds),
            acked_tokens=dict(memory.acked_tokens),
        )

    def assign(self, tp: TopicPart, committed: int, metadata: str | None, known: Recalled) -> None:
        self._generation += 1
        self.parts[tp] = PartitionState(
            tp=tp,
            generation=self._generation,
            tracker=CommitTracker(known.start),
            resolved_before=known.resolved,
            claims=known.claims,
            stored_leases=known.leases,
            unhandled_since=known.unhandled,
            refunds=known.refunds,
            acked_tokens=known.acked_tokens,
            committed=committed,
            committed_metadata=metadata or "",
            metadata_limit=self._metadata_limit,
        )

    def begin_revoke(self, tps: set[TopicPart]) -> None:
        for tp in tps:
            state = self.parts.get(tp)
            if state is not None:
                state.draining = True

    def revoke(self, tp: TopicPart) -> PartitionState | None:
        self._spanning.discard(tp)
        self.with_copies.discard(tp)
        return self.parts.pop(tp, None)

    def fetched(self, state: PartitionState, offset: int) -> None:
        """Track a newly fetched offset of ``state``'s partition (above its highest)."""
        tracker = state.tracker
        tracker.fetched(offset)
        if offset - tracker.committable >= self._max_span - 1:
            self._spanning.add(state.tp)

    # -- generations --------------------------------------------------------

    def current(self, tp: TopicPart, generation: int) -> PartitionState | None:
        """The partition, if it has not moved since ``generation``."""
        state = self.parts.get(tp)
        return state if state is not None and state.generation == generation else None

    def live(self, pending: Pending) -> PartitionState | None:
        """The job's partition, if still owned in its generation and not draining."""
        state = self.current(pending.tp, pending.generation)
        return None if state is None or state.draining else state

    @property
    def counters(self) -> Counters:
        return self._counters

    def count_copy(self, request: CopyRequest, delta: int) -> None:
        state = self.current(request.source, request.generation)
        if state is not None:
            state.copies_in_flight += delta
            if state.copies_in_flight > 0:
                self.with_copies.add(state.tp)
            else:
                self.with_copies.discard(state.tp)

    def running_by_tenant(self) -> Counter[str]:
        """Jobs leased per tenant over every worker of this leasekeeper (leases in flight
        are bounded by worker concurrency, so this stays cheap)."""
        running: Counter[str] = Counter()
        for state in self.parts.values():
            running.update(lease.pending.job.tenant_id for lease in state.leases.values())
        return running

    def in_flight(self, tps: set[TopicPart] | None) -> int:
        return sum(
            len(state.leases) + state.copies_in_flight
            for tp, state in self.parts.items()
            if tps is None or tp in tps
        )

    # -- fetching and resolving ---------------------------------------------

    def track_unoffered(self, tp: TopicPart, offset: int) -> int | None:
        """Track a record that will not be dispatched; its generation, or None if it
        needs no copy (not ours, already in hand, or resolved before)."""
        state = self.parts.get(tp)
        if state is None or offset <= state.tracker.highest_fetched:
            return None
        self.fetched(state, offset)
        state.stored_leases.pop(offset, None)
        if offset in state.resolved_before:
            state.tracker.resolve(offset)
            return None
        return state.generation

    def resolve(self, tp: TopicPart, offset: int, generation: int, how: Resolution,
                batch: StoreBatch | None = None) -> None:  # fmt: skip
        """Mark an offset finished once its fate is durable (ack stored or copy delivered).
        With ``batch``, the caller writes it before letting go of the engine's lock (no
        commit position is computed in between)."""
        state = self.current(tp, generation)
        if state is None:
            return
        if how is Resolution.RETRIED:
            self._counters.retried += 1
        elif how is Resolution.DEAD:
            self._counters.dead += 1
        own = self._store.batch() if batch is None else batch
        own.resolve(tp.topic, tp.partition, offset, how)
        if batch is None:
            self._store.write(own)
        state.tracker.resolve(offset)

    def store_batch(self) -> StoreBatch:
        return self._store.batch()

    def write(self, batch: StoreBatch) -> None:
        self._store.write(batch)

    # -- committing ---------------------------------------------------------

    def commit_positions(self, only: set[TopicPart] | None) -> dict[TopicPart, tuple[int, str]]:
        positions = {}
        for tp, state in self.parts.items():
            if (only is not None and tp not in only) or state.tracker.highest_fetched < 0:
                continue
            offset = state.tracker.committable
            metadata, state.described = _metadata(state, offset)
            if (offset, metadata) != (state.committed, state.committed_metadata):
                positions[tp] = (offset, metadata)
                state.commits_sent[(offset, metadata)] = state.tracker.resolutions
            else:  # the commit Kafka holds says all there is to say
                state.durable_resolutions = state.tracker.resolutions
        return positions

    def unsaved(self) -> int:
        """Resolutions no commit Kafka accepted describes yet: what the next owner of
        these partitions would run again if they moved now. Commits land every
        ``commit_interval_s`` while the group coordinator answers; while it does not
        (a broker failure), this grows until the engine stops leasing."""
        return sum(s.tracker.resolutions - s.durable_resolutions for s in self.parts.values())

    def shrink_metadata(self, tp: TopicPart) -> tuple[int, str] | None:
        state = self.parts.get(tp)
        if state is None:
            return None
        offset = state.tracker.committable
        refused = len(_metadata(state, offset)[0])
        state.metadata_limit = min(state.metadata_limit, refused) // 2
        if state.metadata_limit < _SMALLEST_METADATA:
            state.metadata_limit = 0
        self._metadata_limit = min(self._metadata_limit, state.metadata_limit)
        log.warning(
            "the broker refused %d bytes of commit metadata for %s/%d; using at most %d "
            "(raise the broker's offset.metadata.max.bytes to 4096 to keep progress "
            "across partition moves)",
            refused,
            tp.topic,
            tp.partition,
            state.metadata_limit,
        )
        metadata, state.described = _metadata(state, offset)
        return offset, metadata

    def over_span(self) -> set[TopicPart]:
        """Partitions fetched ``max_span`` or more beyond their commit: of those a fetch
        took there, the ones whose commit has not caught up since."""
        if self._max_span <= 1:  # even an unfetched partition counts: ask every one
            self._spanning = set(self.parts)
        self._spanning = {
            tp
            for tp in self._spanning
            if (state := self.parts.get(tp)) is not None
            and state.tracker.highest_fetched - state.tracker.committable >= self._max_span - 1
        }
        return set(self._spanning)

    def may_read_on(self, tp: TopicPart, cap: int) -> bool:
        """Whether ``tp``, past ``max_span``, may be fetched further: its last commit
        described every offset resolved beyond it (``offset_metadata.describe``), and
        it is fetched under ``cap`` offsets beyond its commit."""
        state = self.parts.get(tp)
        if state is None or not state.described:
            return False
        return state.tracker.highest_fetched - state.tracker.committable < cap - 1

    def committed(self, positions: Mapping[TopicPart, tuple[int, str]]) -> None:
        """Kafka accepted these commits: forget everything below them, here and in the store."""
        batch = self._store.batch()
        for tp, (offset, metadata) in positions.items():
            state = self.parts.get(tp)
            if state is None:
                continue
            state.committed = max(state.committed, offset)
            state.committed_metadata = metadata
            described = state.commits_sent.pop((offset, metadata), None)
            if described is not None and described > state.durable_resolutions:
                state.durable_resolutions = described
            for sent in [
                k for k, n in state.commits_sent.items() if n <= state.durable_resolutions
            ]:
                del state.commits_sent[sent]
            batch.forget_below(tp.topic, tp.partition, offset, legacy=self._store.legacy)
            batch.own_commit(tp.topic, tp.partition, offset, metadata)
            _forget_below(state.resolved_before, offset)
            _forget_below(state.claims, offset)
            _forget_below(state.stored_leases, offset)
            _forget_below(state.unhandled_since, offset)
            _forget_below(state.refunds, offset)
            _forget_below(state.acked_tokens, offset)
        self._store.write(batch)


def _forget_below(memory: dict[int, V], offset: int) -> None:
    for old in [o for o in memory if o < offset]:
        del memory[old]


def _metadata(state: PartitionState, offset: int) -> tuple[str, bool]:
    """Progress beyond ``offset``: what this owner resolved, and what it inherited
    (store or previous owner's metadata) but has not fetched again yet. Without the
    inherited part, the first commit after an assignment would erase it, and a
    second move would re-run every job acked beyond the commit."""
    resolved = state.tracker.resolved_beyond()
    resolved.update(o for o in state.resolved_before if o >= offset)
    progress = Progress(
        resolved=frozenset(resolved),
        claims={
            o: n for o, n in state.claims.items() if o >= offset and n > 0 and o not in resolved
        },
    )
    # A broker whose limit is too small for the overflow section loses it on a move
    # (the store still has it for a restart in place).
    section = state.overflow_section if len(state.overflow_section) <= state.metadata_limit else ""
    if not progress.resolved and not progress.claims:
        return section, True
    limit = state.metadata_limit - len(section)
    if limit <= 0:
        return section, not progress.resolved
    text, described = describe_progress(offset, progress, limit=limit)
    return text + section, described
