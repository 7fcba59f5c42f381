"""``Fetcher``: one fetch of the consumer loop, from back-pressure to the engine.

Each step it works out how many records the window takes and which partitions must
not be fetched (a full window's biggest holders, unless their flood is deferred and
read past; those past the commit span, held tiers, lines waiting for their lane,
blocked copies, floods being moved), pauses and
resumes them, reads what the consumer has, and hands the records to the engine in
offset order: the common ones through the compiled fast path (``fetch_path``), the
rest one by one (``slow_path``). The loop owns the consumer (a fatal error replaces
it), so the fetcher asks for it each time.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from jobcore.kafka import Consumer, KafkaError, Message, TopicPartition
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.core.window import window_slice
from leasekeeper.deferral.port import DeferralPort
from leasekeeper.engine import LeaseEngine
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.family_consumer import FamilyConsumer
from leasekeeper.kafka.fetch_path import gather
from leasekeeper.kafka.rebalance import Assignment
from leasekeeper.kafka.slow_path import SlowPath
from leasekeeper.ordering.lane_loads import LaneLoads
from leasekeeper.overflow.switch_hold import SwitchHolds
from leasekeeper.overflow.watch import OverflowWatch
from schemas.codec import EnvelopeCodec
from schemas.job_headers import JobHead

log = logging.getLogger(__name__)

Due = list[tuple[TopicPart, int, JobHead | None, bytes]]

# Fetches one loop step may read while they are mostly a deferred flood's records.
READ_PAST_ROUNDS = 20
# Full fetches in a row that say the reading is behind (a backlog at least as deep as
# librdkafka's read-ahead waits): then the tenant filling most of one is deferred.
BEHIND_FETCHES = 4


class Fetcher:
    def __init__(
        self,
        *,
        consumer: Callable[[], Consumer | FamilyConsumer],
        engine: LeaseEngine,
        codec: EnvelopeCodec,
        outbox: CopySender,
        gate: TierGate,
        overflow: OverflowWatch,
        switches: SwitchHolds,
        lanes: LaneLoads,
        assignment: Assignment,
        ready_topics: tuple[str, ...],
        overflow_topic: str,
        batch_size: int,
        poll_timeout_s: float,
        until_commit: Callable[[], float],
        fail_fatally: Callable[[KafkaError], None],
        deferral: DeferralPort | None = None,
    ) -> None:
        """``deferral``: floods to read past (None: a full window pauses them)."""
        self._consumer = consumer
        self._fetch_port = engine.fetch
        self._commits = engine.commits
        self._outbox = outbox
        self._gate = gate
        self._overflow = overflow
        self._lanes = lanes
        self._assignment = assignment
        self._batch_size = batch_size
        self._poll_timeout_s = poll_timeout_s
        self._until_commit = until_commit
        self._fail_fatally = fail_fatally
        # The ready topics' partitions by number, made once: the fetch's fast path
        # looks a record's TopicPart up here rather than building one per record.
        self._ready_parts: dict[str, dict[int, TopicPart]] = {
            t: {} for t in ready_topics if gate.tier_of(t) is None
        }
        self._overflow_topic = overflow_topic  # a property builds it: not per record
        self._deferral = deferral
        self._sources = frozenset(self._ready_parts) - {overflow_topic}
        self._slow = SlowPath(fetch=engine.fetch, copies=engine.copies, codec=codec, gate=gate,
                              switches=switches, overflow_topic=overflow_topic,
                              hold=self.hold)  # fmt: skip
        self.paused: set[TopicPart] = set()
        self._full = False
        self._full_fetches = 0  # full fetches in a row (``_behind``)

    def step(self) -> None:
        """Pause what must wait, then read one fetch into the engine; while a fetch is
        mostly a deferred flood's records (an offset each, nothing read), read on
        within the step, up to ``READ_PAST_ROUNDS`` fetches, rather than one fetch a
        loop turn: the turn's other work (handing the flood back) would set the pace."""
        room = self.apply_backpressure()
        # Never fetch more than the window takes: the bound holds in records, and
        # in bytes up to one batch. A paused consumer still serves callbacks.
        limit = max(1, min(self._batch_size, room))
        messages = self._lanes.admit(self.fetch(limit))
        self._behind(messages, limit)
        for fetched in range(1, READ_PAST_ROUNDS + 1):
            # Asked after each fetch: a rebalance inside it may have changed them.
            holding = self._fetch_port.holding() if self._deferral is not None else None
            held = self._take(messages, holding)
            if fetched == READ_PAST_ROUNDS or not holding or len(messages) < limit:
                return  # (never fetch what no round is left to take: it would be lost)
            if held * 2 < len(messages):
                return
            room -= len(messages) - held
            limit = max(1, min(self._batch_size, room))
            messages = self._lanes.admit(self._consumer().consume(num_messages=limit, timeout=0))

    def _behind(self, messages: list[Message], limit: int) -> None:
        """Defer the tenant filling most of a full fetch, when fetches have been full for
        ``BEHIND_FETCHES`` in a row: the leasekeeper reads slower than jobs arrive.

        The window's trigger (``apply_backpressure``) needs a full window, which the
        workers never let fill when the leasekeeper itself is the slowest part (a flood
        written while it runs, on a busy host): then the flood's records wait in
        librdkafka's queue and in Kafka, and its partition's other tenants wait behind
        them, seconds a 100,000 records. A deferred tenant's records cost an offset
        each, so the others are read at read speed, as behind a full window."""
        if self._deferral is None or limit < self._batch_size or len(messages) < limit:
            self._full_fetches = 0
            return
        self._full_fetches += 1
        if self._full_fetches < BEHIND_FETCHES:
            return
        self._full_fetches = 0
        counts = Counter(
            (topic, m.partition(), m.key())
            for m in messages
            if (topic := m.topic()) in self._sources and m.error() is None
        )
        if counts:
            (topic, partition, key), most = counts.most_common(1)[0]
            if key and partition is not None and most * 2 > len(messages):
                self._deferral.behind(TopicPart(topic, partition), key)

    def _take(self, messages: list[Message], holding: dict[TopicPart, bytes] | None) -> int:
        """Hand ``messages`` to the engine; returns how many were held unread."""
        due: Due = []
        held = 0
        i, n = 0, len(messages)
        while i < n:
            # The common records on the compiled fast path; the first that needs more
            # (and everything it implies for ``due``) here.
            i = gather(messages, i, self._ready_parts, self._gate.holding,
                       self._overflow_topic, due, holding)  # fmt: skip
            if holding:
                held += sum(1 for record in due if record[2] is None)
            if i < n:
                self.offer(due)
                self._handle_one(messages[i])
                i += 1
        self.offer(due)
        return held

    def fetch(self, limit: int) -> list[Message]:
        """Up to ``limit`` records, returned as soon as there is one.

        ``consume(n, timeout)`` waits until it has ``n`` records or the timeout ends,
        so at steady rates every record would wait out the whole poll timeout before a
        worker could claim it. Take what is fetched already; when there is nothing,
        wait for the first record only, then take whatever came with it.
        """
        consumer = self._consumer()
        messages = consumer.consume(num_messages=limit, timeout=0)
        if messages:
            return messages
        # Not past the next commit: a paused loop waiting here would hold it back.
        wait_s = min(self._poll_timeout_s, max(0.001, self._until_commit()))
        first = consumer.consume(num_messages=1, timeout=wait_s)
        if not first or limit == 1:
            return first
        return first + consumer.consume(num_messages=limit - 1, timeout=0)

    def offer(self, due: Due) -> None:
        """Hand the engine the records gathered so far, in fetch order."""
        if due:
            self._fetch_port.offer_many(due)
            due.clear()

    def handle(self, message: Message, due: Due | None = None) -> None:
        """A fetched record. A ready job read from its headers joins ``due`` (offered
        with the rest of the fetch under one lock; at once without ``due``: the fast
        path, ``gather``); anything else first offers what ``due`` holds, so the
        engine sees every partition's records in offset order."""
        if due is None:
            due = []
            self.handle(message, due)
            self.offer(due)
            return
        if gather([message], 0, self._ready_parts, self._gate.holding,
                  self._overflow_topic, due) == 0:  # fmt: skip
            self.offer(due)
            self._handle_one(message)

    def _handle_one(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.fatal() or error.code() == KafkaError._FATAL:
                self._fail_fatally(error)
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error: %s", error)
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        assert topic is not None and partition is not None and offset is not None
        self._slow.handle(TopicPart(topic, partition), offset, message)

    def hold(self, tp: TopicPart, offset: int, until_ms: int) -> None:
        """Hold ``tp`` at ``offset`` until ``until_ms`` (seek back, pause): fetched again
        from there once the gate releases it."""
        self._gate.hold(tp, until_ms)
        consumer = self._consumer()
        consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        consumer.pause([TopicPartition(tp.topic, tp.partition)])
        self.paused.add(tp)

    def apply_backpressure(self) -> int:
        """Pause, while the window is full, the partitions holding their share of it or
        more (one partition's backlog must not stop the others' fetch), and any
        partition fetched as far beyond its commit as commit metadata can describe;
        returns how many records this fetch may take."""
        fetch = self._fetch_port
        room = fetch.window_room()
        assignment = self._assignment.parts
        # Hysteresis: full when no room is left, and full until half the window is
        # free again, so a busy window does not flap between paused and fetching.
        self._full = room == 0 or (self._full and room < fetch.window_records // 2)
        deferral = self._deferral
        if deferral is not None:
            over_span = self._commits.over_span(deferral.deferring(), deferral.read_past_cap)
        else:
            over_span = self._commits.over_span()
        wanted = over_span & assignment
        if self._full:
            over, headroom = fetch.over_share(assignment, self._gate.share_unit)
            if self._overflow.move_floods(over, assignment, self._gate.share_unit):
                over, headroom = fetch.over_share(assignment, self._gate.share_unit)
            if deferral is not None:
                # A flood deferred: its partition is read on for the other tenants,
                # whose records the window takes up to a fetch beyond its bound.
                slice_ = window_slice(fetch.window_records, assignment, self._gate.share_unit)
                read_on = deferral.floods({tp for tp in over if tp.topic in self._sources},
                                          slice_)  # fmt: skip
                if read_on:
                    over -= read_on
                    headroom = max(headroom, self._batch_size)
            wanted |= over
            room = headroom
        wanted |= self._overflow.copying(assignment)
        wanted |= (self._gate.held() | self._lanes.waiting()) & assignment
        # A partition whose copy cannot be produced fetches nothing more to fail on.
        wanted |= set(self._outbox.blocked()) & assignment
        self.set_paused(wanted, assignment)
        return room

    def set_paused(self, wanted: set[TopicPart], assignment: set[TopicPart]) -> None:
        self.paused &= assignment
        pause, resume = wanted - self.paused, self.paused - wanted
        # librdkafka keeps a partition's pause across a revoke or a lost session; one
        # paused when it left and assigned again would never be fetched. Resume every
        # newly assigned partition that should not be paused, once.
        resume |= (self._assignment.fresh & assignment) - wanted
        self._assignment.fresh.clear()
        consumer = self._consumer()
        if pause:
            consumer.pause([TopicPartition(tp.topic, tp.partition) for tp in pause])
        if resume:
            consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in resume])
        self.paused = set(wanted)
