"""The Kafka side of the leasekeeper: fetch, decode, offer, pause, reap, commit.

One thread owns the consumer. It never blocks on workers: it feeds the engine's
window, pauses the partitions while the window is full (back-pressure), serves
producer delivery reports, sends the durable copies (through the outbox), runs
the lease reaper, and commits each partition at its lowest unresolved offset on a
bounded cadence (not once per job).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
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
from jobcore.retrying import Backoff, until_done
from jobcore.topics import QueueTopics
from leasekeeper.breaker_feed import BreakerFeed
from leasekeeper.committer import COMMIT_BACKOFF, HANDOVER_COMMIT_PATIENCE_S, Committer
from leasekeeper.control_feed import ControlFeed
from leasekeeper.copies import CopyKind, CopyRequest
from leasekeeper.engine import LeaseEngine
from leasekeeper.family_consumer import FamilyConsumer
from leasekeeper.fetch_path import gather
from leasekeeper.lane_loads import LaneLoads
from leasekeeper.leases import TopicPart
from leasekeeper.log_lines import partitions_line
from leasekeeper.ordering_lane import LaneFeed
from leasekeeper.outbox import Outbox
from leasekeeper.overflow_watch import OverflowWatch
from leasekeeper.switch_hold import RECHECK_MS, CommitReader, SwitchHolds
from leasekeeper.tier_gate import TierGate, wall_ms
from schemas.codec import DecodeError, EnvelopeCodec
from schemas.confluent import SchemaUnavailable
from schemas.job import Job
from schemas.job_headers import JobHead, read_head, read_switch
from schemas.vocabulary import DeadLetterReason

log = logging.getLogger(__name__)
# How long a partition waits before an envelope whose schema was unavailable is read again.
SCHEMA_RETRY_MS = 5_000


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
        outbox: Outbox,
        topics: QueueTopics,
        gate: TierGate,
        config: LoopConfig,
        ready_topics: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
        watch: ErrorWatch | None = None,
        backoff: Backoff = COMMIT_BACKOFF,
        consumer_factory: Callable[[], Consumer | FamilyConsumer] | None = None,
        commits: CommitReader | None = None,
    ) -> None:
        """``commits`` reads the group's commits that diverted jobs wait for
        (``switch_hold``); without it, they do not wait."""
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
        self._overflow = OverflowWatch(
            engine=engine,
            overflow_topic=topics.overflow,
            sources=frozenset(self._ready_topics) - {topics.overflow},
            clock=clock,
        )
        # Jobs a producer diverted to the overflow lane wait for their switch.
        self.switches = SwitchHolds(commits)
        self._overflow_topic = topics.overflow  # a property builds it: not per record
        self._config = config
        self._clock = clock
        self._paused: set[TopicPart] = set()
        # Assigned since the last step: resumed explicitly (see ``_set_paused``).
        self._fresh: set[TopicPart] = set()
        # The family consumers (see family_consumer.py) that applied an assignment.
        self._assigned_once: set[int] = set()
        # Kept by the rebalance callbacks, so no step rebuilds it from the consumer.
        self._assignment: set[TopicPart] = set()
        self._full = False
        self.control: ControlFeed | None = None
        self.breakers: BreakerFeed | None = None
        self.lane: LaneFeed | None = None
        self._lanes = LaneLoads(engine)  # class partitions whose lane entries are not read
        self._last_commit = self._clock()  # nothing to commit before the first fetch
        self._last_reap = 0.0
        self.committer = Committer(engine=engine, consumer=lambda: self._consumer,
                                   producer=producer, clock=clock, backoff=backoff)  # fmt: skip

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
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
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
        self._engine.park_excess()  # a rate-limited backlog must not fill the window
        self._outbox.pump()
        self._producer.poll(0)
        self._gate.release_due()
        self._engine.promote_due()
        if self.control is not None:
            self.control.poll()
            self._engine.cancellations_arrived()
        if self.breakers is not None:
            self.breakers.poll()
        if self.lane is not None:
            self.lane.poll()
        self._overflow.poll(self._consumer)
        now = self._clock()
        if now - self._last_reap >= self._config.reaper_interval_s:
            self._last_reap = now
            self._engine.expire()
            self._engine.sweep_unhandled()
            self._engine.prune_notes()
        commit_due = now - self._last_commit >= self._config.commit_interval_s
        if (commit_due or self._engine.commit_soon()) and self.committer.may_commit(now):
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
            self._engine.offer_many(due)
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

    def _switch_passed(self, tp: TopicPart, message: Message) -> bool:
        """Whether an overflow record may be handed out: one a producer diverted waits
        until the ready partition's commit passed its switch (``switch_hold``). When
        it must wait, its partition is held at it (seek back, pause) and fetched
        again a moment later; the records fetched behind it are dropped meanwhile."""
        switch = read_switch(message.headers())
        if switch is None or self.switches.passed(switch):
            return True
        offset: int = message.offset()  # type: ignore[assignment]
        self._gate.hold(tp, wall_ms() + RECHECK_MS)
        self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        self._consumer.pause([TopicPartition(tp.topic, tp.partition)])
        self._paused.add(tp)
        return False

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
        tp = TopicPart(topic, partition)
        if self._gate.is_held(tp):
            self._note_behind_head(tp, offset, message)
            return  # behind a held head: fetched again once the head is due
        if topic == self._overflow_topic and not self._switch_passed(tp, message):
            return  # a diverted job read through its envelope waits as on the fast path
        head = self._read(tp, offset, message)
        if head is None:
            return  # held for its schema, or dead-lettered
        tier = self._gate.tier_of(topic)
        if tier is None:
            value = message.value()
            assert value is not None  # read above
            self._engine.offer(tp, offset, head, value)
        else:
            self._from_tier(tier, tp, offset, head, message)

    def _read(self, tp: TopicPart, offset: int, message: Message) -> JobHead | None:
        """The job's head from the record's key and headers; the slow path (older
        producers, or headers of another version) decodes the envelope. None when the
        record was held for its schema or dead-lettered as undecodable."""
        value = message.value()
        if value is not None:
            head = read_head(message.key(), message.headers(), value)
            if head is not None:
                return head
        job = self._decode(tp, offset, message)
        return JobHead.of(job) if job is not None else None

    def _decode(self, tp: TopicPart, offset: int, message: Message) -> Job | None:
        """The whole envelope; None when it was held for its schema or dead-lettered."""
        value = message.value()
        try:
            if value is None:
                raise DecodeError("record has no value (tombstone)")
            return self._codec.decode(value)
        except SchemaUnavailable as exc:
            self._hold_for_schema(tp, offset, str(exc))
        except DecodeError as exc:
            self._dead_letter_raw(tp, offset, message.key(), value, str(exc))
        return None

    def _hold_for_schema(self, tp: TopicPart, offset: int, reason: str) -> None:
        """An envelope whose schema is neither cached nor obtainable (the registry is
        down): the record is fine, so hold its partition and fetch it again later,
        rather than dead-letter a good job; other partitions go on."""
        log.warning("%s/%d@%d waits for its schema: %s", tp.topic, tp.partition, offset, reason)
        self._gate.hold(tp, wall_ms() + SCHEMA_RETRY_MS)
        self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        self._consumer.pause([TopicPartition(tp.topic, tp.partition)])
        self._paused.add(tp)

    def _from_tier(
        self, tier: str, tp: TopicPart, offset: int, job: JobHead, message: Message
    ) -> None:
        """A delay-tier record: dispatch it when due; wait out the last fraction of a tier
        in the engine's timer (the record stays unresolved in Kafka meanwhile); hold the
        partition (seek back, pause) until the head's tier wait is over; or hop to the
        tier that fits the wait that is left."""
        now = wall_ms()
        value = message.value()
        assert value is not None
        if job.run_at_ms - now < self._gate.tiers.seconds[0] * 1000:
            self._engine.forget_delayed(job.job_id)
            self._engine.offer(tp, offset, job, value, not_before_ms=job.run_at_ms)
            return
        _, produced_ms = message.timestamp()
        release_at = self._gate.release_at_ms(
            tier, produced_ms if produced_ms > 0 else now, job.run_at_ms
        )
        if release_at > now:
            self._engine.note_delayed(tp, offset, job)
            self._gate.hold(tp, release_at)
            self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
            self._consumer.pause([TopicPartition(tp.topic, tp.partition)])
            self._paused.add(tp)
            return
        hop = self._gate.tiers.next_hop(job.run_at_ms, now)
        assert hop is not None  # not due: checked above
        self._hop(tp, offset, job, value, hop)

    def _note_behind_head(self, tp: TopicPart, offset: int, message: Message) -> None:
        """A tier record fetched behind a held head: not dispatched now, but indexed by
        id so ``inspect job`` finds it. Records of other topics are not noted."""
        value = message.value()
        if value is None or self._gate.tier_of(tp.topic) is None:
            return
        if self._engine.noted(tp, offset):
            return  # fetched again behind the same head: noted the first time
        head = read_head(message.key(), message.headers(), value)
        if head is None:
            try:
                head = JobHead.of(self._codec.decode(value))
            except (DecodeError, SchemaUnavailable):
                return  # dead-lettered (or held) when its turn comes
        self._engine.note_delayed(tp, offset, head)

    def _hop(self, tp: TopicPart, offset: int, head: JobHead, value: bytes, hop: str) -> None:
        """Copy the job to tier ``hop``; the original resolves on the copy's delivery.

        A hop changes nothing in the job (its attempt and due time stay), so a record
        read from its headers goes byte for byte, never decoded: a job delayed by
        minutes hops through the short tiers several times, and decoding and encoding
        it at each hop cost more than the rest of its handling. A record read through
        its envelope (an older producer's) is written anew with headers."""
        generation = self._engine.track_unoffered(tp, offset)
        if generation is None:
            return
        if head.full is not None:
            request = CopyRequest(kind=CopyKind.HOP, source=tp, offset=offset,
                                  generation=generation, job=head.full, tier=hop)  # fmt: skip
        else:
            request = CopyRequest(kind=CopyKind.HOP, source=tp, offset=offset,
                                  generation=generation, head=head, raw_value=value,
                                  tier=hop)  # fmt: skip
        self._engine.copy(request)

    def _dead_letter_raw(
        self, tp: TopicPart, offset: int, key: bytes | None, value: bytes | None, reason: str
    ) -> None:
        """Undecodable input goes to the DLQ with the reason; the partition keeps moving."""
        generation = self._engine.track_unoffered(tp, offset)
        if generation is None:
            return
        log.warning("undecodable record %s/%d/%d: %s", tp.topic, tp.partition, offset, reason)
        self._engine.copy(
            CopyRequest(
                kind=CopyKind.DEAD_RAW,
                source=tp,
                offset=offset,
                generation=generation,
                raw_key=key,
                raw_value=value,
                reason=DeadLetterReason.UNDECODABLE,
                detail=reason,
            )
        )

    def _apply_backpressure(self) -> int:
        """Pause, while the window is full, the partitions holding their share of it or
        more (one partition's backlog must not stop the others' fetch), and any
        partition fetched as far beyond its commit as commit metadata can describe;
        returns how many records this fetch may take."""
        room = self._engine.window_room()
        assignment = self._assignment
        # Hysteresis: full when no room is left, and full until half the window is
        # free again, so a busy window does not flap between paused and fetching.
        self._full = room == 0 or (self._full and room < self._engine.window_records // 2)
        wanted = self._engine.over_span() & assignment
        if self._full:
            over, headroom = self._engine.over_share(assignment, self._gate.share_unit)
            if self._overflow.move_floods(over, assignment, self._gate.share_unit):
                over, headroom = self._engine.over_share(assignment, self._gate.share_unit)
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
        resume |= (self._fresh & assignment) - wanted
        self._fresh.clear()
        if pause:
            self._consumer.pause([TopicPartition(tp.topic, tp.partition) for tp in pause])
        if resume:
            self._consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in resume])
        self._paused = set(wanted)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        committed = until_done(
            lambda: consumer.committed(partitions, timeout=10),
            what="reading the committed offsets of assigned partitions",
            stop=self._stop,
            watch=self._watch,
            backoff=self._backoff,
        )
        for tp in committed:
            self._engine.assign(TopicPart(tp.topic, tp.partition), tp.offset, tp.metadata)
            self._assignment.add(TopicPart(tp.topic, tp.partition))
            self._fresh.add(TopicPart(tp.topic, tp.partition))
        if self.lane is not None:  # else ordering within this life only (not connected)
            tps = [TopicPart(tp.topic, tp.partition) for tp in committed]
            self._lanes.assigned(
                consumer, [tp for tp in tps if self._gate.tier_of(tp.topic) is None]
            )
        self._assigned_once.add(id(consumer))
        if self._every_family_assigned():
            self._engine.assignment_received()
        log.info("assigned %s", partitions_line((tp.topic, tp.partition) for tp in committed))
        log.debug("committed offsets %s", [(tp.topic, tp.partition, tp.offset) for tp in committed])

    def _every_family_assigned(self) -> bool:
        """Whether every consumer of this leasekeeper applied its first assignment.
        Each family's consumer gets its own, one after another: settling in ends
        only after the last, or the held acks of a class whose partitions come
        later are refused as unknown and their jobs run again."""
        families = getattr(self._consumer, "families", None)
        if families is None:  # one plain consumer
            return True
        return all(id(c) in self._assigned_once for c in families.values())

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Hand partitions over: stop dispatching them, let their jobs in flight finish
        within the grace period, commit what is resolved (and the progress beyond it),
        then let go. Jobs still leased after the grace are run again by the next owner."""
        moving = {TopicPart(tp.topic, tp.partition) for tp in partitions}
        self._gate.forget(moving)
        self._lanes.forget(moving, self.lane)
        self._engine.begin_revoke(moving)
        left = self._drain(moving)
        self.commit(only=moving, patience_s=HANDOVER_COMMIT_PATIENCE_S)
        for tp in moving:
            self._engine.revoke(tp)
        self._assignment -= moving
        log.info(
            "revoked %s (%d jobs still in flight after the grace period)",
            partitions_line((tp.topic, tp.partition) for tp in moving),
            left,
        )

    def _drain(self, tps: set[TopicPart] | None) -> int:
        """Serve delivery reports until ``tps`` have nothing in flight or the grace ends."""
        deadline = self._clock() + self._config.drain_grace_s
        while self._engine.in_flight(tps) and self._clock() < deadline:
            self._outbox.pump()
            self._producer.poll(0.05)
            self._engine.expire()
        return self._engine.in_flight(tps)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        lost = {TopicPart(tp.topic, tp.partition) for tp in partitions}
        log.warning(
            "lost %s (the group's session expired); their jobs in flight run again "
            "on the next owner",
            partitions_line((tp.topic, tp.partition) for tp in lost),
        )
        self._gate.forget(lost)
        self._lanes.forget(lost, self.lane)
        for tp in lost:
            self._engine.revoke(tp)
        self._assignment -= lost

    def _fail_fatally(self, error: KafkaError) -> None:
        """The consumer is unusable (for example fenced: another member holds its
        static instance id, or its own stale commit after a session timeout met its
        rejoined self) and its partitions are another member's now. Let go of them at
        once, so no job of theirs is handed out or acked here any more. Then rejoin
        with a new consumer, unless that already happened ``REJOINS`` times within
        ``REJOIN_WINDOW_S`` (two processes share an instance id): then stop, and the
        leasekeeper exits non-zero for its supervisor."""
        lost = set(self._engine.assigned())
        self._gate.forget(lost)
        self._lanes.forget(lost, self.lane)
        for tp in lost:
            self._engine.revoke(tp)
        self._assignment.clear()
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
            self._outbox.flush_status(10)
            self.commit(patience_s=HANDOVER_COMMIT_PATIENCE_S, serve_group=True)
        finally:
            self._consumer.close()  # revokes (nothing left in flight) and leaves the group

    def _drain_keeping_membership(self) -> None:
        deadline = self._clock() + self._config.drain_grace_s
        while self._engine.in_flight() and self._clock() < deadline:
            self._consumer.consume(num_messages=1, timeout=0.05)  # paused: serves the group
            self._outbox.pump()
            self._producer.poll(0)
            self._engine.expire()
