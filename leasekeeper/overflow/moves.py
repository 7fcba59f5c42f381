"""The overflow lane inside the engine: moving a flooding tenant's jobs aside.

``OverflowLane`` decides; this part acts on the engine's state under its lock:
it takes a flooding tenant's ready jobs of a partition out of the window and
queues their copies (``CopyKind.OVERFLOW``, copy-then-resolve like a retry: the
source offset resolves only once the copy is durable), turns each later job of
that tenant fetched from the partition into such a copy, follows the copies to
their delivery, and keeps the entries durable: in the lease store at once (a
restart in place), and in the partition's commit metadata (a move).
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import replace

from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.hooks import Offer
from leasekeeper.core.job_reader import JobReader
from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.recent import RECENT_LIMIT
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.window import ReadyWindow
from leasekeeper.overflow.policy import OverflowEntry, OverflowLane, merge, split_metadata
from leasekeeper.overflow.policy import decode as decode_entries
from leasekeeper.overflow.policy import encode as encode_entries

log = logging.getLogger(__name__)

# Job ids remembered across the overflow partitions owned here, to skip a second copy
# of a job (made again after a crash between its delivery and the resolution of its
# source, so at most a commit interval of copies after the first).
SEEN_IDS = RECENT_LIMIT


class OverflowMoves:
    def __init__(
        self,
        *,
        lane: OverflowLane,
        book: PartitionBook,
        window: ReadyWindow,
        copies: CopyQueue,
        store: LeaseStore,
        reader: JobReader | None = None,
    ) -> None:
        self.lane = lane
        self._reader = reader or JobReader()
        self._book = book
        self._window = window
        self._copies = copies
        self._store = store
        self.moved = 0  # copies delivered since start
        # The overflow topic, set by the service: its records are the lane's copies.
        self.topic = ""
        self._seen: OrderedDict[tuple[TopicPart, str], None] = OrderedDict()
        # Partitions whose entries moved on since they were last written.
        self._dirty: set[TopicPart] = set()
        # Copies delivered per partition, and how many of them an accepted commit
        # describes: copies are not finished jobs, and must not stop leasing while
        # they wait for a commit (see ``unsaved``).
        self._copied: Counter[TopicPart] = Counter()
        self._durable: dict[TopicPart, int] = {}
        self._sent: dict[tuple[TopicPart, int, str], int] = {}

    # -- entering and following ---------------------------------------------------

    def floods(self, over: set[TopicPart], slice_: int) -> int:
        """Put the tenants that flood the partitions ``over`` (paused by a full window)
        into overflow and move their ready jobs there; returns how many jobs."""
        moved = 0
        for tp in over:
            state = self._book.parts.get(tp)
            if state is None or state.draining:
                continue
            for tenant in self.lane.flooders(tp, self._window.held_by_tenant(tp), slice_):
                moved += self._enter(tp, tenant)
        return moved

    def _enter(self, tp: TopicPart, tenant: str) -> int:
        self.lane.enter(tp, tenant)
        self._persist(tp)
        taken = self._window.remove_ready(
            lambda p: p.tp == tp and p.job.tenant_id == tenant and p.job.ordering_key is None
        )
        taken.sort(key=lambda p: p.offset)  # copies leave in enqueue order
        self._copies.add([self._copy(p) for p in taken])
        log.info(
            "tenant %s floods %s/%d: %d ready jobs and its next ones go to the overflow lane",
            tenant, tp.topic, tp.partition, len(taken),
        )  # fmt: skip
        return len(taken)

    def offered(self, pending: Pending) -> Offer:
        """A fetched job: skipped when it is a second copy of one read from the overflow
        lane (``copied_again``), taken when its tenant is in overflow here (``follow``)."""
        if self.copied_again(pending):
            return Offer.SKIP
        return Offer.TAKEN if self.follow(pending) else Offer.PASS

    def follow(self, pending: Pending) -> bool:
        """Copy ``pending`` to the overflow lane if its tenant is in overflow on its
        partition (its newer jobs follow the older ones there); False otherwise. A job
        with an ordering key never moves: its key's line lives on its own partition,
        and a copy in the lane would be a second line of the same key."""
        if pending.job.ordering_key is not None:
            return False
        if not self.lane.follows(pending.tp, pending.job.tenant_id):
            return False
        self._copies.add([self._copy(pending)])
        return True

    def _copy(self, pending: Pending) -> CopyRequest:
        """The job as it was, with the attempts already counted on its offset (a job
        that killed its workers must not escape ``max_attempts`` by moving)."""
        state = self._book.parts.get(pending.tp)
        claims = state.claims.get(pending.offset, 0) if state is not None else 0
        job = None  # read from its headers and unchanged: copied byte for byte, not decoded
        if claims or pending.job.full is not None:
            try:
                full = self._reader.full(pending)
            except Exception as exc:  # DecodeError, or the registry's SchemaUnavailable
                return self._reader.unreadable(pending, exc, why="move to the overflow lane",
                                               again=lambda: self._copy(pending))  # fmt: skip
            job = replace(full, attempt=full.attempt + claims)
        self.lane.decided(pending.tp, pending.job.tenant_id, 1)
        return CopyRequest(
            kind=CopyKind.OVERFLOW,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            job=job,
            head=pending.job if job is None else None,
            # Unchanged (no attempt counted here): the fetched bytes are sent as they are.
            raw_value=pending.envelope if claims == 0 else None,
        )

    def copied_again(self, pending: Pending) -> bool:
        """Whether ``pending`` is a second copy of a job read from the same overflow
        partition since it was assigned here (a crash between a copy's delivery and
        the resolution of its source makes one): skipped, the first one runs."""
        if pending.tp.topic != self.topic:
            return False
        key = (pending.tp, pending.job.job_id)
        if key in self._seen:
            return True
        self._seen[key] = None
        if len(self._seen) > SEEN_IDS:
            self._seen.popitem(last=False)
        return False

    # -- copies coming back ----------------------------------------------------

    def copy_delivered(self, request: CopyRequest, *, dead: bool, at: int) -> bool:
        """An overflow copy is durable at ``at`` of the overflow partition (-1: it went
        as a dead letter): counted as moved. Its source offset resolves as usual."""
        if request.kind is CopyKind.OVERFLOW:
            self.delivered(request, -1 if dead else at)
        return False

    def delivered(self, request: CopyRequest, offset: int) -> None:
        """The copy is durable at ``offset`` of the overflow partition."""
        tenant = request.tenant_id
        if tenant is None or self._book.current(request.source, request.generation) is None:
            return
        self.moved += 1
        self._copied[request.source] += 1
        self.lane.delivered(request.source, tenant, offset)
        # Written with the next commit (``refresh``), not once per copy: a ``last`` a
        # little behind after a crash only orders re-copied jobs behind their first
        # copies, which run first (see docs/fairness.md).
        self._dirty.add(request.source)

    # -- commits ----------------------------------------------------------------

    def sent(
        self, positions: Mapping[TopicPart, tuple[int, str]], only: set[TopicPart] | None
    ) -> None:
        """Commits about to be sent: remember how many copies each describes."""
        for tp, copied in self._copied.items():
            if tp in positions:
                self._sent[(tp, *positions[tp])] = copied
            elif only is None or tp in only:
                self._durable[tp] = copied  # the commit Kafka holds says it all

    def accepted(self, positions: Mapping[TopicPart, tuple[int, str]]) -> None:
        """Kafka accepted these commits."""
        for tp, (offset, metadata) in positions.items():
            described = self._sent.pop((tp, offset, metadata), None)
            if described is not None and described > self._durable.get(tp, 0):
                self._durable[tp] = described
        self._sent = {k: n for k, n in self._sent.items() if n > self._durable.get(k[0], 0)}

    def unsaved(self, tp: TopicPart | None = None) -> int:
        """Copies delivered (their sources resolved) that no accepted commit describes:
        what a move now would copy again."""
        if tp is not None:
            copied = self._copied.get(tp)
            return 0 if copied is None else copied - self._durable.get(tp, 0)
        return sum(n - self._durable.get(p, 0) for p, n in self._copied.items())

    def copied_parts(self) -> set[TopicPart]:
        """The partitions that have copies to the lane this owner made."""
        return set(self._copied)

    def copy_dropped(self, request: CopyRequest) -> None:
        if request.kind is CopyKind.OVERFLOW and (tenant := request.tenant_id) is not None:
            self.lane.decided(request.source, tenant, -1)

    def overflow_committed(self, committed: Mapping[int, int]) -> None:
        """The group's committed offsets of overflow partitions (read from Kafka): clear
        the tenants whose overflow is done."""
        self.lane.committed.update(committed)
        for tp, tenants in self.lane.clear_passed().items():
            self._persist(tp)
            log.info("tenant(s) %s back from the overflow lane on %s/%d",
                     ", ".join(tenants), tp.topic, tp.partition)  # fmt: skip

    # -- durable state ------------------------------------------------------------

    def recall(self, tp: TopicPart, metadata: str | None) -> dict[str, OverflowEntry]:
        """What the store (a restart in place) and the commit metadata (a move) say of
        the tenants in overflow on ``tp``: a tenant named by either is."""
        _, moved = split_metadata(metadata)
        return merge(decode_entries(self._store.overflow(tp.topic, tp.partition)), moved)

    def assign(self, tp: TopicPart, entries: Mapping[str, OverflowEntry]) -> None:
        self.lane.restore(tp, entries)
        if entries:  # else the store holds none already: nothing to write
            self._persist(tp)

    def assigned(self, tp: TopicPart, metadata: str | None) -> None:
        """The ``PartitionHook`` protocol: a rebalance is rare, and the store read of
        one partition's entries short, so it is done under the engine's lock."""
        self.assign(tp, self.recall(tp, metadata))

    def revoked(self, tp: TopicPart, *, held: bool) -> None:
        if held:
            self.revoke(tp)

    def revoke(self, tp: TopicPart) -> None:
        """The partition's next owner learns the entries from the commit metadata."""
        self.lane.forget(tp)
        for key in [key for key in self._seen if key[0] == tp]:
            del self._seen[key]
        self._dirty.discard(tp)
        self._copied.pop(tp, None)
        self._durable.pop(tp, None)
        self._sent = {k: n for k, n in self._sent.items() if k[0] != tp}
        batch = self._store.batch()
        batch.overflow(tp.topic, tp.partition, "")
        self._store.write(batch)

    def refresh(self) -> None:
        """Write the entries that moved on (called before each commit is computed)."""
        for tp in self._dirty:
            self._persist(tp)
        self._dirty.clear()

    def _persist(self, tp: TopicPart) -> None:
        """Into the store now, and into the next commit's metadata."""
        entries = self.lane.entries.get(tp, {})
        batch = self._store.batch()
        batch.overflow(tp.topic, tp.partition, encode_entries(entries) if entries else "")
        self._store.write(batch)
        state = self._book.parts.get(tp)
        if state is not None:
            state.overflow_section = self.lane.section(tp)
