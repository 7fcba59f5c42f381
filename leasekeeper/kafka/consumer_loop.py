"""The Kafka side of the leasekeeper: fetch, decode, offer, pause, reap, commit.

One thread owns the consumer. It never blocks on workers: it feeds the engine's
window, pauses the partitions while the window is full (back-pressure), serves
producer delivery reports, sends the durable copies (through the outbox), runs
the lease reaper, and commits (``committer.py``) each partition at its lowest
unresolved offset on a bounded cadence. Rebalances: ``rebalance.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jobcore.kafka import (
    Consumer,
    ErrorWatch,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from jobcore.kafka_retry import Backoff
from jobcore.topics import QueueTopics
from leasekeeper.core.engine import LeaseEngine
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.kafka.committer import COMMIT_BACKOFF, HANDOVER_COMMIT_PATIENCE_S, Committer
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.family_consumer import FamilyConsumer
from leasekeeper.kafka.feeds import Feed
from leasekeeper.kafka.fetch_path import gather
from leasekeeper.kafka.rebalance import Assignment, Rebalance
from leasekeeper.kafka.slow_path import SlowPath
from leasekeeper.ordering.lane import LaneFeed
from leasekeeper.ordering.lane_loads import LaneLoads
from leasekeeper.overflow.switch_hold import CommitReader, SwitchHolds
from leasekeeper.overflow.watch import OverflowWatch
from schemas.codec import EnvelopeCodec
from schemas.job_headers import JobHead

log = logging.getLogger(__name__)


# Rejoins after a fatal consumer error allowed within the window before giving up.
REJOINS = 3
REJOIN_WINDOW_S = 600.0


class _Rejoined(Exception):
    """The consumer was replaced mid-step: drop the rest of the old one's batch."""


@dataclass(frozen=True, kw_only=True)
class LoopConfig:
    batch_size: int = 500
    poll_timeout_s: float = 0.05
    commit_interval_s: float = 0.1
    reaper_interval_s: float = 0.5
    # How long partitions being revoked (rebalance) or a stopping leasekeeper wait
    # for their jobs in flight to be settled before committing and letting go.
    drain_grace_s: float = 10.0


class ConsumerLoop:
    def __init__(
        self,
        *,
        consumer: Consumer | FamilyConsumer,
        producer: Producer,
        engine: LeaseEngine,
        codec: EnvelopeCodec,
        outbox: CopySender,
        topics: QueueTopics,
        gate: TierGate,
        config: LoopConfig,
        ready_topics: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
        watch: ErrorWatch | None = None,
        backoff: Backoff = COMMIT_BACKOFF,
        consumer_factory: Callable[[], Consumer | FamilyConsumer] | None = None,
        commits: CommitReader | None = None,
        feeds: Sequence[Feed] = (),
        lane: LaneFeed | None = None,
    ) -> None:
        """``commits`` reads the group's commits that diverted jobs wait for
        (``switch_hold``); without it, they do not wait. ``feeds`` (caught up before
        ``run``) and the ordering ``lane`` (one of them, which the loop also reads
        lines from) are followed at every step."""
        self._consumer = consumer
        # A fatal consumer error is answered by rejoining with a new consumer from here.
        self._consumer_factory = consumer_factory
        self._rejoins: list[float] = []
        self._watch = watch or ErrorWatch()
        self._backoff = backoff
        self._stop = threading.Event()
        self._fatal = False
        self._ran = False
        self._producer = producer
        self._engine = engine
        self._codec = codec
        self._outbox = outbox
        self._topics = topics
        self._gate = gate
        # The priority classes' topics (the default class's is ``topics.ready``).
        self._ready_topics = ready_topics or (topics.ready,)
        # The ready topics' partitions by number, made once: the fetch's fast path
        # looks a record's TopicPart up here rather than building one per record.
        self._ready_parts: dict[str, dict[int, TopicPart]] = {
            t: {} for t in self._ready_topics if self._gate.tier_of(t) is None
        }
        # The overflow lane: a flooded class partition's excess moves there.
        self._overflow = OverflowWatch(overflow=engine.overflow,
                                       window_records=engine.fetch.window_records,
                                       overflow_topic=topics.overflow,
                                       sources=frozenset(self._ready_topics) - {topics.overflow},
                                       clock=clock)  # fmt: skip
        # Jobs a producer diverted to the overflow lane wait for their switch.
        self.switches = SwitchHolds(commits)
        self._overflow_topic = topics.overflow  # a property builds it: not per record
        self._slow = SlowPath(fetch=engine.fetch, copies=engine.copies, codec=codec, gate=gate,
                              switches=self.switches, overflow_topic=self._overflow_topic,
                              hold=self._hold)  # fmt: skip
        self._config = config
        self._clock = clock
        self._paused: set[TopicPart] = set()
        # Kept by the rebalance callbacks, so no step rebuilds it from the consumer.
        self._assignment = Assignment()
        self._full = False
        self.lane = lane
        self._feeds = (*feeds, lane) if lane is not None else tuple(feeds)
        self._lanes = LaneLoads(engine.ordering)  # class partitions whose lane entries are not read
        self._last_commit = self._clock()  # nothing to commit before the first fetch
        self._last_reap = 0.0
        self.committer = Committer(commits=engine.commits, consumer=lambda: self._consumer,
                                   producer=producer, clock=clock, backoff=backoff)  # fmt: skip
        self.rebalance = Rebalance(assignment=self._assignment, partitions=engine.partitions,
                                   workers=engine.workers, committer=self.committer,
                                   outbox=outbox, producer=producer, gate=gate,
                                   lanes=self._lanes, lane=lambda: self.lane,
                                   consumer=lambda: self._consumer, stop=lambda: self._stop,
                                   watch=self._watch, backoff=backoff, clock=clock,
                                   drain_grace_s=config.drain_grace_s)  # fmt: skip

    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        self._ran = True
        self._subscribe()
        try:
            while not stop.is_set():
                # Bad credentials only reach error_cb; without this the loop would
                # poll a cluster that keeps refusing it, forever.
                self._watch.raise_if_setup_error()
                try:
                    self._step()
                except _Rejoined:
                    continue  # the old consumer's records are another member's now
        finally:
            self._shutdown()

    def _subscribe(self) -> None:
        self._consumer.subscribe(
            [*self._ready_topics, *self._gate.topics],
            on_assign=self.rebalance.on_assign,
            on_revoke=self.rebalance.on_revoke,
            on_lost=self.rebalance.on_lost,
        )

    def close_if_idle(self) -> None:
        """Close the consumer of a loop that never ran (Kafka never reached, or a
        setup error): ``run`` closes it otherwise."""
        if not self._ran:
            self._ran = True
            self._consumer.close()

    def _step(self) -> None:
        self._lanes.step(self.lane)
        room = self._apply_backpressure()
        # Never fetch more than the window takes: the bound holds in records, and
        # in bytes up to one batch. A paused consumer still serves callbacks.
        due: list[tuple[TopicPart, int, JobHead, bytes]] = []
        messages = self._lanes.admit(self._fetch(max(1, min(self._config.batch_size, room))))
        i, n = 0, len(messages)
        while i < n:
            # The common records on the compiled fast path; the first that needs more
            # (and everything it implies for ``due``) here.
            i = gather(messages, i, self._ready_parts, self._gate.holding,
                       self._overflow_topic, due)  # fmt: skip
            if i < n:
                self._offer(due)
                self._handle_one(messages[i])
                i += 1
        self._offer(due)
        self._engine.limits.park_excess()  # a rate-limited backlog must not fill the window
        self._outbox.pump()
        self._producer.poll(0)
        self._gate.release_due()
        self._engine.fetch.promote_due()
        if self._feeds:
            for feed in self._feeds:
                feed.poll()
            self._engine.fetch.cancellations_arrived()  # the control feed's, answered at once
        self._overflow.poll(self._consumer)
        now = self._clock()
        if now - self._last_reap >= self._config.reaper_interval_s:
            self._last_reap = now
            self._engine.workers.expire()
            self._engine.workers.sweep_unhandled()
            self._engine.fetch.prune_notes()
        commit_due = now - self._last_commit >= self._config.commit_interval_s
        if (commit_due or self._engine.commits.commit_soon()) and self.committer.may_commit(now):
            self._last_commit = now
            self._commit_async()

    def _commit_async(self) -> None:
        self.committer.commit_async()

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The consumer's ``on_commit``: the answer to an asynchronous commit."""
        self.committer.on_commit(error, partitions)

    def commit(
        self, only: set[TopicPart] | None = None, patience_s: float = 0.0, serve_group: bool = False
    ) -> None:
        """A synchronous commit (``Committer.commit``), for a revoke and for shutdown."""
        self.committer.commit(only, patience_s, serve_group)

    @property
    def commits(self) -> int:
        """Commits Kafka took so far."""
        return self.committer.commits

    def _fetch(self, limit: int) -> list[Message]:
        """Up to ``limit`` records, returned as soon as there is one.

        ``consume(n, timeout)`` waits until it has ``n`` records or the timeout ends,
        so at steady rates every record would wait out the whole poll timeout before a
        worker could claim it. Take what is fetched already; when there is nothing,
        wait for the first record only, then take whatever came with it.
        """
        messages = self._consumer.consume(num_messages=limit, timeout=0)
        if messages:
            return messages
        # Not past the next commit: a paused loop waiting here would hold it back.
        until_commit = self._last_commit + self._config.commit_interval_s - self._clock()
        wait_s = min(self._config.poll_timeout_s, max(0.001, until_commit))
        first = self._consumer.consume(num_messages=1, timeout=wait_s)
        if not first or limit == 1:
            return first
        return first + self._consumer.consume(num_messages=limit - 1, timeout=0)

    def _offer(self, due: list[tuple[TopicPart, int, JobHead, bytes]]) -> None:
        """Hand the engine the records gathered so far, in fetch order."""
        if due:
            self._engine.fetch.offer_many(due)
            due.clear()

    def _handle(
        self, message: Message, due: list[tuple[TopicPart, int, JobHead, bytes]] | None = None
    ) -> None:
        """A fetched record. A ready job read from its headers joins ``due`` (offered
        with the rest of the fetch under one lock; at once without ``due``: the fast
        path, ``gather``); anything else first offers what ``due`` holds, so the
        engine sees every partition's records in offset order."""
        if due is None:
            due = []
            self._handle(message, due)
            self._offer(due)
            return
        if gather([message], 0, self._ready_parts, self._gate.holding,
                  self._overflow_topic, due) == 0:  # fmt: skip
            self._offer(due)
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

    def _hold(self, tp: TopicPart, offset: int, until_ms: int) -> None:
        """Hold ``tp`` at ``offset`` until ``until_ms`` (seek back, pause): fetched again
        from there once the gate releases it."""
        self._gate.hold(tp, until_ms)
        self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        self._consumer.pause([TopicPartition(tp.topic, tp.partition)])
        self._paused.add(tp)

    def _apply_backpressure(self) -> int:
        """Pause, while the window is full, the partitions holding their share of it or
        more (one partition's backlog must not stop the others' fetch), and any
        partition fetched as far beyond its commit as commit metadata can describe;
        returns how many records this fetch may take."""
        room = self._engine.fetch.window_room()
        assignment = self._assignment.parts
        # Hysteresis: full when no room is left, and full until half the window is
        # free again, so a busy window does not flap between paused and fetching.
        self._full = room == 0 or (self._full and room < self._engine.fetch.window_records // 2)
        wanted = self._engine.commits.over_span() & assignment
        if self._full:
            over, headroom = self._engine.fetch.over_share(assignment, self._gate.share_unit)
            if self._overflow.move_floods(over, assignment, self._gate.share_unit):
                over, headroom = self._engine.fetch.over_share(assignment, self._gate.share_unit)
            wanted |= over
            room = headroom
        wanted |= self._overflow.copying(assignment)
        wanted |= (self._gate.held() | self._lanes.waiting()) & assignment
        # A partition whose copy cannot be produced fetches nothing more to fail on.
        wanted |= set(self._outbox.blocked()) & assignment
        self._set_paused(wanted, assignment)
        return room

    def _set_paused(self, wanted: set[TopicPart], assignment: set[TopicPart]) -> None:
        self._paused &= assignment
        pause, resume = wanted - self._paused, self._paused - wanted
        # librdkafka keeps a partition's pause across a revoke or a lost session; one
        # paused when it left and assigned again would never be fetched. Resume every
        # newly assigned partition that should not be paused, once.
        resume |= (self._assignment.fresh & assignment) - wanted
        self._assignment.fresh.clear()
        if pause:
            self._consumer.pause([TopicPartition(tp.topic, tp.partition) for tp in pause])
        if resume:
            self._consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in resume])
        self._paused = set(wanted)

    def _fail_fatally(self, error: KafkaError) -> None:
        """The consumer is unusable (for example fenced: another member holds its
        static instance id, or its own stale commit after a session timeout met its
        rejoined self) and its partitions are another member's now. Let go of them at
        once, so no job of theirs is handed out or acked here any more. Then rejoin
        with a new consumer, unless that already happened ``REJOINS`` times within
        ``REJOIN_WINDOW_S`` (two processes share an instance id): then stop, and the
        leasekeeper exits non-zero for its supervisor."""
        self.rebalance.let_go_all()
        self._paused.clear()
        self.committer.forget()
        now = self._clock()
        self._rejoins = [at for at in self._rejoins if now - at < REJOIN_WINDOW_S]
        if self._consumer_factory is None or len(self._rejoins) >= REJOINS:
            self._fatal = True
            if self._rejoins:
                log.error(
                    "fenced %d times in %.0f minutes: is another leasekeeper running with "
                    "the same --instance-id?",
                    len(self._rejoins) + 1,
                    REJOIN_WINDOW_S / 60,
                )
            raise KafkaException(error)
        self._rejoins.append(now)
        log.warning(
            "the consumer failed for good (%s); rejoining the group as a new consumer "
            "(%d of %d in %.0f minutes)",
            error.str(),
            len(self._rejoins),
            REJOINS,
            REJOIN_WINDOW_S / 60,
        )
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("closing the failed consumer: %s", exc)
        self._consumer = self._consumer_factory()
        self._subscribe()
        raise _Rejoined

    def _shutdown(self) -> None:
        """Stop fetching, drain the jobs in flight, commit, leave the group."""
        self.switches.close()
        if self._fatal:
            self._consumer.close()  # nothing to drain or commit: the partitions are gone
            return
        try:
            assignment = self._consumer.assignment()
            if assignment:
                self._consumer.pause(assignment)
            self._drain_keeping_membership()
            self._producer.flush(10)
            self._outbox.flush_records(10)
            self.commit(patience_s=HANDOVER_COMMIT_PATIENCE_S, serve_group=True)
        finally:
            self._consumer.close()  # revokes (nothing left in flight) and leaves the group

    def _drain_keeping_membership(self) -> None:
        deadline = self._clock() + self._config.drain_grace_s
        while self._engine.partitions.in_flight() and self._clock() < deadline:
            self._consumer.consume(num_messages=1, timeout=0.05)  # paused: serves the group
            self._outbox.pump()
            self._producer.poll(0)
            self._engine.workers.expire()
