"""The Kafka side of the leasekeeper: fetch, decode, offer, pause, reap, commit.

One thread owns the consumer. It never blocks on workers: each step it feeds the
engine's window and pauses the partitions while the window is full (``fetcher.py``),
then runs its named tasks (``loop_task.py``): it serves producer delivery reports,
sends the durable copies (through the outbox), runs the lease reaper; and it commits
(``committer.py``) each partition at its lowest unresolved offset on a bounded
cadence. Rebalances: ``rebalance.py``.
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
    Producer,
    TopicPartition,
)
from jobcore.kafka_retry import Backoff
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.core.window import window_slice
from leasekeeper.deferral.reader import DeferredReaders
from leasekeeper.engine import LeaseEngine
from leasekeeper.kafka.committer import COMMIT_BACKOFF, HANDOVER_COMMIT_PATIENCE_S, Committer
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.family_consumer import FamilyConsumer
from leasekeeper.kafka.feeds import Feed
from leasekeeper.kafka.fetcher import Fetcher
from leasekeeper.kafka.loop_task import LoopTask
from leasekeeper.kafka.rebalance import Assignment, Rebalance
from leasekeeper.ordering.lane import LaneFeed
from leasekeeper.ordering.lane_loads import LaneLoads
from leasekeeper.overflow.switch_hold import CommitReader, SwitchHolds
from leasekeeper.overflow.watch import OverflowWatch
from schemas.codec import EnvelopeCodec

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
        deferred_reader: Callable[[], Consumer] | None = None,
    ) -> None:
        """``commits`` reads the group's commits that diverted jobs wait for
        (``switch_hold``); without it, they do not wait. ``feeds`` (caught up before
        ``run``) and the ordering ``lane`` (one of them, which the loop also reads
        lines from) are followed at every step. ``deferred_reader`` opens the
        consumer that reads a deferred flood again (without it, or with
        ``defer_floods`` off, a full window pauses a flooded partition instead)."""
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
        # The overflow lane: a flooded class partition's excess moves there.
        self._overflow = OverflowWatch(overflow=engine.overflow,
                                       window_records=engine.fetch.window_records,
                                       overflow_topic=topics.overflow,
                                       sources=frozenset(self._ready_topics) - {topics.overflow},
                                       clock=clock)  # fmt: skip
        # Jobs a producer diverted to the overflow lane wait for their switch.
        self.switches = SwitchHolds(commits)
        self._config = config
        self._clock = clock
        # Kept by the rebalance callbacks, so no step rebuilds it from the consumer.
        self._assignment = Assignment()
        self.lane = lane
        self._feeds = (*feeds, lane) if lane is not None else tuple(feeds)
        self._lanes = LaneLoads(engine.ordering)  # class partitions whose lane entries are not read
        self._last_commit = self._clock()  # nothing to commit before the first fetch
        # Floods read past: a second reader per partition hands the flood back.
        deferral = None
        if deferred_reader is not None and engine.deferral.enabled:
            deferral = engine.deferral
        self._deferred: DeferredReaders | None = None
        if deferral is not None and deferred_reader is not None:
            self._deferred = DeferredReaders(
                port=deferral, open_consumer=deferred_reader, codec=codec,
                slice_=lambda: window_slice(engine.fetch.window_records,
                                            self._assignment.parts, gate.share_unit),
                window_records=engine.fetch.window_records, batch_size=config.batch_size,
            )  # fmt: skip
        self.fetcher = Fetcher(consumer=lambda: self._consumer, engine=engine, codec=codec,
                               outbox=outbox, gate=gate, overflow=self._overflow,
                               switches=self.switches, lanes=self._lanes,
                               assignment=self._assignment, ready_topics=self._ready_topics,
                               overflow_topic=topics.overflow, batch_size=config.batch_size,
                               poll_timeout_s=config.poll_timeout_s,
                               until_commit=self._until_commit,
                               fail_fatally=self._fail_fatally,
                               deferral=deferral)  # fmt: skip
        # What each step does after its fetch, in this order, then what runs on a timer.
        # Looked up when they run (lambdas): the parts a test fakes may lack some.
        self._each_step: tuple[LoopTask, ...] = (
            # A rate-limited backlog must not fill the window.
            LoopTask("park what rate limits hold back", 0, lambda: engine.limits.park_excess()),
            LoopTask("send the copies", 0, lambda: outbox.pump()),
            LoopTask("serve delivery reports", 0, lambda: producer.poll(0)),
            LoopTask("release the tiers due", 0, lambda: gate.release_due()),
            LoopTask("promote the delayed jobs due", 0, lambda: engine.fetch.promote_due()),
            LoopTask("follow the feeds", 0, self._follow_feeds),
            LoopTask("watch for floods", 0, lambda: self._overflow.poll(self._consumer)),
            LoopTask("hand deferred floods back", 0, self._hand_back),
        )
        self._timed = (LoopTask("expire leases", config.reaper_interval_s, self._reap),)
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
        self.fetcher.step()
        for task in self._each_step:
            task.run()
        now = self._clock()
        for task in self._timed:
            task.run_if_due(now)
        commit_due = now - self._last_commit >= self._config.commit_interval_s
        if (commit_due or self._engine.commits.commit_soon()) and self.committer.may_commit(now):
            self._last_commit = now
            self._commit_async()

    def _follow_feeds(self) -> None:
        if self._feeds:
            for feed in self._feeds:
                feed.poll()
            self._engine.fetch.cancellations_arrived()  # the control feed's, answered at once

    def _reap(self) -> None:
        self._engine.workers.expire()
        self._engine.workers.sweep_unhandled()
        self._engine.fetch.prune_notes()

    def _until_commit(self) -> float:
        """Seconds to the next timed commit: a fetch waiting for records stops there."""
        return self._last_commit + self._config.commit_interval_s - self._clock()

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

    def _fail_fatally(self, error: KafkaError) -> None:
        """The consumer is unusable (for example fenced: another member holds its
        static instance id, or its own stale commit after a session timeout met its
        rejoined self) and its partitions are another member's now. Let go of them at
        once, so no job of theirs is handed out or acked here any more. Then rejoin
        with a new consumer, unless that already happened ``REJOINS`` times within
        ``REJOIN_WINDOW_S`` (two processes share an instance id): then stop, and the
        leasekeeper exits non-zero for its supervisor."""
        self.rebalance.let_go_all()
        self.fetcher.paused.clear()
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

    def _hand_back(self) -> None:
        if self._deferred is not None:
            self._deferred.step()

    def _shutdown(self) -> None:
        """Stop fetching, drain the jobs in flight, commit, leave the group."""
        self.switches.close()
        if self._deferred is not None:
            self._deferred.close()
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
