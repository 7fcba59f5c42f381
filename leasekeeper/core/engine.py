"""The lease engine: the leasekeeper's state machine, free of Kafka and gRPC.

The consumer loop offers fetched jobs; workers claim, heartbeat and settle
through the RPC layer; copies to Kafka are decided as values (``CopyRequest``)
and taken by the outbox on the Kafka loop's thread, so no RPC thread ever
produces. This class is the facade and the lock; each part holds one kind of
state and its invariants, in its own module:

- ``window``: the ready jobs (dispatch policy, bytes) and the delayed heap;
- ``partition_book``: per partition the commit tracker, what the store and the
  previous owner knew, generations, commit positions and metadata;
- ``intake``: what becomes of a fetched record (skip, restore, claim a dedupe key);
- ``lease_core``: claim, heartbeat, settle, expire (tokens, attempts, settling in);
- ``failures``: the retry path (retry or dead letter, as a copy);
- ``unhandled``: jobs no connected worker runs;
- ``breaker_gate``: circuit breakers per job type (admit, probe, or park);
- ``parking``: a job back to a delay tier without spending an attempt;
- ``copy_queue``: copies decided and not yet taken by the outbox;
- ``engine_view``: ``snapshot`` and ``job_view``.

One lock guards all parts; every public method is short, so contention stays low
at batches of tens to hundreds of jobs. A claim long-polls on a condition of its
own over that lock: arriving work wakes one waiting claimer that runs its type,
not all of them (see ``_work_arrived``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from jobcore.control import JobStatus
from jobcore.progress import JobProgress
from jobcore.topics import DEFAULT_CLASS
from leasekeeper.breaker.gate import BreakerGate
from leasekeeper.breaker.policy import BreakerBoard, BreakerState, BreakerView, Transition
from leasekeeper.core.claimer import Claimer
from leasekeeper.core.clocks import now_ms
from leasekeeper.core.control_state import ControlState
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.deliveries import Deliveries
from leasekeeper.core.engine_config import Counters, EngineConfig, EngineContext
from leasekeeper.core.intake import Intake
from leasekeeper.core.job_reader import Decode, JobReader
from leasekeeper.core.lease_core import LeaseCore
from leasekeeper.core.leases import Grant, LeaseAnswer, Pending, Settlement, TopicPart
from leasekeeper.core.parking import Parking
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.resolved_ids import ResolvedIds
from leasekeeper.core.retry_budget import RetryBudget
from leasekeeper.core.retry_path import FailurePath
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.unhandled import UnhandledSweep
from leasekeeper.core.window import ReadyWindow, of_types
from leasekeeper.fairness.round_robin import DispatchPolicy
from leasekeeper.fairness.view import FairnessSnapshot, fairness_snapshot
from leasekeeper.limits.admission import LimitDispatch, LimitsSnapshot
from leasekeeper.limits.rate_limit import RateLimits
from leasekeeper.ordering.gate import OrderingGate
from leasekeeper.ordering.keys import BlockedLine, KeyBook, LaneEntry
from leasekeeper.overflow.moves import OverflowMoves
from leasekeeper.overflow.policy import OverflowLane
from leasekeeper.views import engine_view
from leasekeeper.views.snapshots import EngineSnapshot
from schemas.job import Job
from schemas.job_headers import JobHead
from schemas.vocabulary import ErrorClass

__all__ = ["UNKNOWN_JOB_TYPE", "Counters", "EngineConfig", "LeaseEngine"]

UNKNOWN_JOB_TYPE = ErrorClass.UNKNOWN_JOB_TYPE.value

log = logging.getLogger(__name__)


class LeaseEngine:
    def __init__(
        self,
        *,
        store: LeaseStore,
        config: EngineConfig,
        budget: RetryBudget | None = None,
        control: ControlState | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        policy: DispatchPolicy[Pending] | None = None,
        decode: Decode | None = None,
        sleep: Callable[[threading.Condition, float], object] | None = None,
    ) -> None:
        """``clock`` is wall time (run_at, dedupe windows, what workers see);
        ``monotonic`` times lease deadlines, timeouts and waits. ``policy`` chooses
        which ready job is dispatched next (``TenantRoundRobin`` by default).
        ``decode`` reads a job's envelope when a copy rewrites it (jobs offered by
        their headers only); jobs offered decoded need none. ``sleep`` is how a
        waiting claim sleeps on its condition (``Condition.wait``; a test that fakes
        ``monotonic`` lets its time pass there)."""
        self.control = control or ControlState()
        self._sleep = sleep or threading.Condition.wait
        self.counters = Counters()
        self._budget = budget or RetryBudget()
        self._store = store
        self._config = config
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.RLock()
        self._closed = False
        self._holding = False  # leasing held back until a commit lands
        self._claimers: list[Claimer] = []  # waiting for work, longest first
        self._claim_wakeups = 0
        reader = self._reader = JobReader(decode)
        self._resolved = ResolvedIds(max_ids=config.resolved_ids,
                                     window_s=config.resolved_window_s)  # fmt: skip
        ctx = EngineContext(config=config, store=store, counters=self.counters,
                            control=self.control, clock=clock, monotonic=monotonic,
                            reader=reader, resolved=self._resolved)  # fmt: skip
        self._book = PartitionBook(store=store, counters=self.counters, max_span=config.max_span)
        self._window = ReadyWindow(records=config.window_records, max_bytes=config.window_bytes,
                                   wake=self._work_arrived, policy=policy,
                                   class_weights=config.class_weights,
                                   tenants=config.tenants)  # fmt: skip
        keys = KeyBook(on_dead=config.on_dead, full=reader.full, keep_jobs=config.lane_jobs_here)
        self._ordering = OrderingGate(keys=keys,
                                      book=self._book, window=self._window, store=store,
                                      counters=self.counters, reader=reader,
                                      add=lambda requests: self._copies.add(requests),
                                      now_ms=lambda: now_ms(clock))  # fmt: skip
        self._copies = CopyQueue(book=self._book, status_records=config.status_records,
                                 route=self._ordering.route, clock=monotonic)  # fmt: skip
        rng = rng or random.Random()
        failures = FailurePath(config=config, budget=self._budget, rng=rng, clock=clock,
                               reader=reader)  # fmt: skip
        book, window = self._book, self._window
        self._overflow = OverflowMoves(lane=OverflowLane(share=config.overflow_share), book=book,
                                       window=window, copies=self._copies,
                                       store=store, reader=reader)  # fmt: skip
        self._intake = Intake(ctx=ctx, book=book, window=window, copies=self._copies,
                              lines=self._ordering, hooks=(self._overflow,))  # fmt: skip
        self._limits = LimitDispatch(limits=RateLimits(config.rate_limits, monotonic),
                                     window=window, book=book,
                                     window_records=config.window_records,
                                     monotonic=monotonic, reader=reader)  # fmt: skip
        self._parking = Parking(book=book, counters=self.counters, clock=clock, reader=reader)
        self._breakers = BreakerGate(board=BreakerBoard(config.breakers), parking=self._parking,
                                     retries=config.retries, monotonic=monotonic,
                                     rng=rng)  # fmt: skip
        self._core = LeaseCore(ctx=ctx, book=book, window=window, intake=self._intake,
                               failures=failures, budget=self._budget, copies=self._copies,
                               gates=(self._limits, self._breakers),
                               ordering=self._ordering)  # fmt: skip
        self._unhandled = UnhandledSweep(ctx=ctx, book=book, window=window, failures=failures)
        self._deliveries = Deliveries(
            copies=self._copies,
            book=book,
            reader=reader,
            clock=clock,
            hooks=(self._overflow, self._ordering, self._intake),
        )

    # -- partitions -------------------------------------------------------

    def assign(self, tp: TopicPart, committed: int, metadata: str | None = None) -> None:
        """Take a partition from ``committed`` on, remembering what the store knows and
        what the previous owner left in the commit metadata (whichever knows more)."""
        known = self._book.recall(tp, committed, metadata)
        overflow = self._overflow.recall(tp, metadata)
        with self._lock:
            self._book.assign(tp, committed, metadata, known)
            self._overflow.assign(tp, overflow)
            self._limits.follow_partitions()

    def assign_lines(self, tp: TopicPart, end_offset: int, lane: Iterable[LaneEntry]) -> None:
        """A class partition assigned: what of its lines is in the ordering lane, and its
        end offset now (its lines run once it is fetched that far; see ``KeyBook``)."""
        with self._lock:
            self._ordering.keys.assign(tp, end_offset, lane)

    def lane_operator(self, tp: TopicPart, seq: int, entry: LaneEntry | None) -> None:
        """An operator replayed (``entry``) or skipped (None) a dead head in the lane."""
        with self._lock:
            self._ordering.keys.operator_at(tp, seq, entry)
            self._ordering.release()

    def blocked_keys(self) -> list[BlockedLine]:
        with self._lock:
            return self._ordering.blocked()

    def assignment_received(self) -> None:
        """The consumer applied the group's first assignment in full (possibly empty)."""
        with self._lock:
            self._core.settle_in.assignment_received()

    def settling_in(self) -> bool:
        """True while leases not known yet are answered "retry later" (see SettleIn)."""
        with self._lock:
            return self._core.settling()

    def begin_revoke(self, tps: set[TopicPart]) -> None:
        """Stop dispatching from partitions about to move; their leases may still settle."""
        with self._lock:
            self._book.begin_revoke(tps)
            self._window.drop(lambda p: p.tp in tps)

    def revoke(self, tp: TopicPart) -> None:
        """Forget a partition: its ready jobs leave the window, its leases become unknown."""
        with self._lock:
            if self._book.revoke(tp) is not None:
                self._window.drop(lambda p: p.tp == tp)
                self._overflow.revoke(tp)
            self._ordering.keys.revoke(tp)
            self._limits.follow_partitions()

    def assigned(self) -> list[TopicPart]:
        """The partitions this engine holds (a fatal consumer error lets go of them all)."""
        with self._lock:
            return list(self._book.parts)

    def in_flight(self, tps: set[TopicPart] | None = None) -> int:
        """Leases and copies not yet settled in ``tps`` (all partitions by default). Every
        copy counts from the moment it is decided until the outbox delivered or dropped
        it: retries, dead letters, hops, raw dead letters and dedupe claims alike."""
        with self._lock:
            return self._book.in_flight(tps)

    # -- fetching ---------------------------------------------------------

    def offer(
        self,
        tp: TopicPart,
        offset: int,
        job: JobHead | Job,
        envelope: bytes,
        not_before_ms: int = 0,
    ) -> None:
        """A record from Kafka, read from its headers (``JobHead``) or decoded (``Job``):
        skip it if already resolved, else queue it (for dispatch at once, or at
        ``not_before_ms``)."""
        head = job if isinstance(job, JobHead) else JobHead.of(job)
        with self._lock:
            self._intake.offer(tp, offset, head, envelope, not_before_ms)

    def offer_many(self, records: Sequence[tuple[TopicPart, int, JobHead, bytes]]) -> None:
        """Records due now, in fetch order, under one hold of the lock: taking it once
        per record was the leasekeeper's largest single cost at high rates."""
        with self._lock:
            offer = self._intake.offer
            for tp, offset, head, envelope in records:
                offer(tp, offset, head, envelope, 0)

    def cancellations_arrived(self) -> None:
        """Answer at once for cancelled jobs that wait here (in the window, the timer or
        a held tier): they will be skipped, so their status is known now, and
        ``producer cancel`` can say so. A running one is answered when its lease ends."""
        fresh = self.control.take_fresh()
        if fresh:
            with self._lock:
                self._intake.cancelled_waiting(fresh)

    def note_delayed(self, tp: TopicPart, offset: int, job: JobHead) -> None:
        """A delay-tier record seen and left in Kafka until due: remembered by id for
        ``inspect job`` (the record itself stays the only copy of the job)."""
        status = self._intake.note_delayed(tp, offset, job)
        if status is not None:
            with self._lock:
                self._copies.add([status])

    def noted(self, tp: TopicPart, offset: int) -> bool:
        """Whether this delay-tier record is noted already (``note_delayed``)."""
        return self._intake.noted(tp, offset)

    def prune_notes(self) -> int:
        """Forget old notes by job id (see ``Intake.prune_notes``); returns how many."""
        return self._intake.prune_notes()

    def forget_delayed(self, job_id: str) -> None:
        """A delayed job leaves its tier for the timer or the window: the note is done."""
        self._intake.forget_delayed(job_id)

    def track_unoffered(self, tp: TopicPart, offset: int) -> int | None:
        """Track a record that will not be dispatched (undecodable, or hopping to another
        delay tier); returns its generation for the copy, None if it needs none."""
        with self._lock:
            return self._book.track_unoffered(tp, offset)

    def promote_due(self) -> int:
        """Move delayed jobs whose time came to the ready window; returns how many. Then
        park the ready jobs of types whose breaker is open, and take the ordered lines'
        turn (``OrderingGate.turn``) (called every loop turn)."""
        with self._lock:
            live = self._book.live
            moved = self._window.promote_due(now_ms(self._clock), lambda p: live(p) is not None)
            self._copies.add(self._breakers.sweep(self._window))
            self._ordering.turn()
            return moved

    @property
    def window_records(self) -> int:
        return self._config.window_records

    @property
    def run_first_classes(self) -> frozenset[str]:
        """The classes dispatched at a higher weight than the default class (critical,
        by default): a worker runs their jobs before those it claimed earlier and has
        not started, or a prefetched batch of bulk work would delay them."""
        weights = self._config.class_weights
        default = weights.get(DEFAULT_CLASS, 0)
        return frozenset(name for name, weight in weights.items() if weight > default)

    def window_room(self) -> int:
        """How many more records the window takes (0 when full by records or bytes)."""
        with self._lock:
            return self._window.room()

    def over_share(
        self, fetching: set[TopicPart], unit: Callable[[TopicPart], object] | None = None
    ) -> tuple[set[TopicPart], int]:
        """The partitions a full window pauses (those holding their share of it or
        more) and the records the others may still fetch: see ``ReadyWindow.over_share``."""
        with self._lock:
            return self._window.over_share(fetching, unit)

    # -- the overflow lane (see overflow_lane) --------------------------------

    def overflow_topic(self, topic: str) -> None:
        """The overflow lane's topic (its records are copies, a second one is skipped)."""
        with self._lock:
            self._overflow.topic = topic

    def overflow_floods(self, over: set[TopicPart], slice_: int) -> int:
        """Move to the overflow lane the tenants flooding ``over`` (ready partitions a
        full window pauses; ``slice_`` is each one's share of the window); returns how
        many ready jobs moved."""
        with self._lock:
            return self._overflow.floods(over, slice_)

    def overflow_watched(self) -> set[int]:
        """Overflow partitions whose committed offset decides whether a tenant is back."""
        with self._lock:
            return self._overflow.lane.watched()

    def overflow_committed(self, committed: Mapping[int, int]) -> None:
        """The group's committed offsets in the overflow topic, read from Kafka."""
        with self._lock:
            self._overflow.overflow_committed(committed)

    def copying(self, limit: int, unsaved: int) -> set[TopicPart]:
        """Partitions not to fetch further for now: those with ``limit`` copies or more
        decided and not delivered (fetching more would only queue more copies), and
        those with ``unsaved`` copies to the overflow lane in no accepted commit yet
        (what a move, after the group coordinator failed, would copy again)."""
        with self._lock:
            parts = self._book.parts
            if limit > 0 and unsaved > 0:  # only partitions with copies can qualify
                candidates = self._book.with_copies | self._overflow.copied_parts()
            else:
                candidates = set(parts)
            return {
                tp
                for tp in candidates
                if (s := parts.get(tp)) is not None
                and (s.copies_in_flight >= limit or self._overflow.unsaved(tp) >= unsaved)
            }

    # -- workers ------------------------------------------------------------

    def claim(
        self,
        worker: str,
        max_jobs: int,
        wait_s: float,
        job_types: frozenset[str] = frozenset(),
        *,
        reports_started: bool = False,
        start_now: int = 0,
        max_bytes: int = 0,
    ) -> list[Grant]:
        """Hand out up to ``max_jobs`` of ``job_types`` (empty: any type), waiting up to
        ``wait_s`` for the first one. Jobs of other types stay for other workers. A
        worker that ``reports_started`` gets back the attempt of a job that expires
        before it started (see ``started_only``), except the first ``start_now``,
        which go to idle handlers and count as started at once. ``max_bytes`` (0: no
        cap) bounds the answer's size: the jobs past it stay ready, not leased."""
        deadline = self._monotonic() + wait_s
        accept = of_types(job_types)
        with self._lock:
            self._unhandled.workers.saw(worker, job_types, now_ms(self._clock))
            while True:
                if not self._wait_for_work(job_types, deadline):
                    return []
                if self._closed:
                    # Draining for shutdown: hand out nothing new, but keep the long
                    # poll so workers do not spin while their last acks come in.
                    remaining = deadline - self._monotonic()
                    if remaining > 0:
                        self._wait(remaining, job_types)
                    return []
                grants, actions = self._core.lease_ready(worker, max_jobs, accept,
                                                         reports_started=reports_started,
                                                         start_now=start_now,
                                                         max_bytes=max_bytes)  # fmt: skip
                self._copies.add(actions)
                if grants:
                    self._wake_next()  # what this claim left is another's
                    break
                # Only jobs over a rate limit wait: sleep until a token comes, not spin.
                pause = self._limits.wait_s(job_types)
                remaining = deadline - self._monotonic()
                if pause <= 0 or remaining <= 0:
                    break
                self._wait(min(pause, remaining), job_types)
        return grants

    def _wait_for_work(self, job_types: frozenset[str], deadline: float) -> bool:
        """Wait until a job of ``job_types`` is ready and commits keep up, or the engine
        closes (True), or until ``deadline`` (False)."""
        while (not self._window.has_any(job_types) or self._commits_behind()) and not self._closed:
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                return False
            self._wait(remaining, job_types)
        return True

    def _wait(self, timeout: float, job_types: frozenset[str]) -> None:
        """Wait as a claimer, on a condition of its own over the engine's lock, so that
        arriving work can wake one claimer of its type (see ``_work_arrived``)."""
        claimer = Claimer(threading.Condition(self._lock), job_types)
        self._claimers.append(claimer)
        try:
            self._sleep(claimer.cond, timeout)
        finally:
            self._claimers.remove(claimer)

    def _work_arrived(self, job_type: str) -> None:
        """A job of ``job_type`` became ready (under the lock): wake one claimer for it.

        Waking every waiting claimer for every arrival (``notify_all``) cost the
        leasekeeper 5% of its time at 1,200 jobs/s, in that call alone, and the
        woken claims that found nothing then fought for the lock and the GIL.
        The claimer woken is the one waiting longest among those that run the
        type; while it has not taken the lock yet, it takes later arrivals of its
        types too, and wakes nobody else. One that leaves jobs behind wakes the
        next (``_wake_next``)."""
        chosen: Claimer | None = None
        for claimer in self._claimers:
            if claimer.types and job_type not in claimer.types:
                continue
            if claimer.woken:
                return
            if chosen is None:
                chosen = claimer
        if chosen is not None:
            self._wake(chosen)

    def _wake_next(self) -> None:
        """Wake the longest-waiting claimer for which a ready job is left."""
        for claimer in self._claimers:
            if not claimer.woken and self._window.has_any(claimer.types):
                self._wake(claimer)
                return

    def _wake_all(self) -> None:
        for claimer in self._claimers:
            if not claimer.woken:
                self._wake(claimer)

    def _wake(self, claimer: Claimer) -> None:
        claimer.woken = True
        self._claim_wakeups += 1
        claimer.cond.notify()

    @property
    def waiting_claims(self) -> int:
        """Claims long-polling for work right now (one per idle worker, at most)."""
        with self._lock:
            return len(self._claimers)

    @property
    def claim_wakeups(self) -> int:
        """Waiting claims woken so far (for work, a commit that landed, or closing)."""
        with self._lock:
            return self._claim_wakeups

    def commit_soon(self) -> bool:
        """Whether half as many finished jobs as hold leasing back wait for a commit:
        the loop commits now instead of at its interval, so a fast drain is not held
        (its claims answered with nothing) while a commit that would land is due."""
        with self._lock:
            unsaved = self._book.unsaved() - self._overflow.unsaved()
            return unsaved >= self._config.max_uncommitted // 2

    def _commits_behind(self) -> bool:
        """Whether too many finished jobs wait for a commit Kafka accepts: hand out no
        more until one lands (``committed`` wakes the claimers)."""
        # The overflow lane's copies are not finished jobs: they wait apart (``copying``).
        behind = self._book.unsaved() - self._overflow.unsaved() >= self._config.max_uncommitted
        if behind != self._holding:
            self._holding = behind
            if behind:
                log.warning(
                    "%d finished jobs are in no accepted commit yet (is the group "
                    "coordinator down?); no new leases until Kafka takes a commit",
                    self._book.unsaved(),
                )
            else:
                log.info("commits land again; leasing resumes")
        return behind

    def heartbeat(
        self,
        leases: list[tuple[str, str]],
        started: frozenset[str] = frozenset(),
        progress: Mapping[str, JobProgress] | None = None,
    ) -> list[LeaseAnswer]:
        """Extend leases; ``started`` names those whose handler has started, ``progress``
        has the latest progress of some (by lease id), held with their lease."""
        with self._lock:
            return self._core.heartbeat(leases, started, progress)

    def settle(self, settlements: list[Settlement]) -> list[LeaseAnswer]:
        """Acks are persisted before the answer; nacks are resolved once copied durably."""
        with self._lock:
            answers, actions = self._core.settle(settlements)
            self._copies.add(actions)
            self._copies.add(self._breakers.sweep(self._window))
        return answers

    def expire(self) -> int:
        """The reaper: leases past ``until`` count as failed attempts (worker presumed dead),
        except a bounded number of never-started ones, which go back to the front with
        their attempt; returns the copies made."""
        with self._lock:
            actions = self._core.expire()
            self._copies.add(actions)
            self._copies.add(self._breakers.sweep(self._window))
        return len(actions)

    def park_excess(self) -> int:
        """Park in a delay tier the ready jobs of a rate-limited type or tenant beyond
        its share of the window (see ``LimitDispatch``); returns how many."""
        if not self._limits.active:
            return 0
        with self._lock:
            actions = self._limits.park_excess(now_ms(self._clock))
            self._copies.add(actions)
        return len(actions)

    def queue_partitions(self, topics: frozenset[str], partitions: int) -> None:
        """The topics the queue's leasekeepers consume and their partitions: each type's
        rate limit applies here in the share of them this leasekeeper owns."""
        with self._lock:
            self._limits.queue_partitions(topics, partitions)

    def limits(self) -> LimitsSnapshot | None:
        """Each rate limiter (rate, tokens, waiting) for ``inspect`` and metrics."""
        with self._lock:
            return self._limits.snapshot()

    def sweep_unhandled(self) -> int:
        """Ready jobs whose type no connected worker runs: note (durably) when that was
        first seen, and dead-letter those that waited past the grace; returns how many."""
        with self._lock:
            actions = self._unhandled.sweep(now_ms(self._clock))
            self._copies.add(actions)
        return len(actions)

    # -- parking and circuit breakers --------------------------------------------

    def park(self, pending: Pending, delay_s: float, reason: str) -> None:
        """Send ``pending`` back to the delay tier that fits ``delay_s`` without spending
        an attempt; its offset resolves (as ``parked``) once the copy is delivered.

        For a job that must not run now and must not be held either (an open breaker, a
        rate limit): held, it would stop its partition's commit. ``pending`` must have
        left the window (``ReadyWindow.pop`` / ``remove_ready``) and not be leased.
        ``reason`` is for logs (``describe``); ``Counters.parked`` counts the job."""
        with self._lock:
            self._copies.add([self._parking.park(pending, delay_s, reason)])

    def breaker_transitions(self) -> list[Transition]:
        """Breaker state changes since the last call, for the breaker topic."""
        with self._lock:
            return self._breakers.take_transitions()

    def adopt_breaker(
        self,
        job_type: str,
        *,
        state: BreakerState,
        until_ms: int,
        cooldown_s: float,
        trips: int,
        forced: bool,
        reason: str,
    ) -> None:
        """Take a breaker state published on the queue's breaker topic (by another
        leasekeeper, an operator, or this one before a restart). ``until_ms`` is wall
        time; the breaker runs on the monotonic clock."""
        with self._lock:
            until = self._monotonic() + (until_ms - now_ms(self._clock)) / 1000
            self._breakers.adopt(job_type, state=state, until=until, cooldown_s=cooldown_s,
                                 trips=trips, forced=forced, reason=reason)  # fmt: skip
            self._copies.add(self._breakers.sweep(self._window))

    def wall_ms(self, monotonic_s: float) -> int:
        """A breaker's monotonic deadline as epoch ms (0 stays 0), for the topic."""
        if monotonic_s <= 0:
            return 0
        return now_ms(self._clock) + int((monotonic_s - self._monotonic()) * 1000)

    def breakers(self) -> list[BreakerView]:
        with self._lock:
            return self._breakers.views()

    # -- the outbox's side of copies ------------------------------------------

    def copy(self, request: CopyRequest) -> None:
        """Queue a copy decided outside the engine (a hop, an undecodable record's dead
        letter), counted in flight like the engine's own."""
        with self._lock:
            self._copies.add([request])

    def take_copies(self) -> list[CopyRequest]:
        """Copies queued since the last call, for the outbox to send."""
        with self._lock:
            return self._copies.take()

    def take_statuses(self) -> list[JobStatus]:
        """Status records (how jobs ended) queued since the last call, for the outbox."""
        with self._lock:
            return self._copies.take_statuses()

    def is_current(self, request: CopyRequest) -> bool:
        """False once the copy's partition moved: the next owner runs the job again.
        A status record is always current: the job ended here whoever owns it now."""
        if request.kind is CopyKind.STATUS:
            return True
        with self._lock:
            return self._book.current(request.source, request.generation) is not None

    def copy_delivered(self, request: CopyRequest, *, dead: bool = False, at: int = -1) -> None:
        """The copy is durable (see ``Deliveries``)."""
        with self._lock:
            self._deliveries.apply((request,), dead=dead, at=at)

    def copies_delivered(self, requests: list[CopyRequest]) -> None:
        """Several copies durable at once (a poll's delivery reports): one store write."""
        with self._lock:
            self._deliveries.apply(requests)

    def copy_dropped(self, request: CopyRequest) -> None:
        """The outbox gave up a copy whose partition moved: no longer in flight here."""
        with self._lock:
            self._copies.done(request)
            self._intake.claim_dropped(request)
            self._ordering.dropped(request)
            if request.kind is CopyKind.OVERFLOW:
                self._overflow.dropped(request)

    # -- committing ---------------------------------------------------------

    def commit_positions(
        self, only: set[TopicPart] | None = None
    ) -> dict[TopicPart, tuple[int, str]]:
        """Partitions whose commit (offset, or progress beyond it) changed since the last."""
        with self._lock:
            self._overflow.refresh()
            positions = self._book.commit_positions(only)
            self._overflow.sent(positions, only)
            return positions

    def shrink_metadata(self, tp: TopicPart) -> tuple[int, str] | None:
        """The broker refused ``tp``'s commit metadata as too large: the position to
        commit instead, with at most half as much metadata (none at the end). A move
        then re-runs more of the jobs finished beyond the commit, but the commit moves."""
        with self._lock:
            return self._book.shrink_metadata(tp)

    def over_span(self) -> set[TopicPart]:
        """Partitions fetched so far beyond their commit that metadata could not describe."""
        with self._lock:
            return self._book.over_span()

    def committed(self, positions: Mapping[TopicPart, tuple[int, str]]) -> None:
        """Kafka accepted these commits: the store can forget everything below them."""
        with self._lock:
            self._book.committed(positions)
            self._overflow.accepted(positions)
            if self._holding:
                self._wake_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake_all()

    # -- inspection ---------------------------------------------------------

    def snapshot(self) -> EngineSnapshot:
        with self._lock:
            return engine_view.snapshot(book=self._book, window=self._window,
                                        budget=self._budget, counters=self.counters,
                                        settling_in=self._core.settling(),
                                        unhandled=self._unhandled, now_ms=now_ms(self._clock),
                                        mono=self._monotonic())  # fmt: skip

    def fairness(self) -> FairnessSnapshot:
        """Per priority class and per tenant: what ``inspect`` and the metrics show."""
        with self._lock:
            return fairness_snapshot(config=self._config, window=self._window,
                                     book=self._book, now_ms=now_ms(self._clock),
                                     overflow=self._overflow.lane.backlog())  # fmt: skip

    def job_view(self, given: str) -> dict[str, object]:
        """Where one job is in this leasekeeper: for ``inspect job ID``. ``given`` is a
        job id or a unique prefix of one (8+ characters)."""
        with self._lock:
            return engine_view.job_view(given, book=self._book, window=self._window,
                                        control=self.control, store=self._store,
                                        now_ms=now_ms(self._clock),
                                        reader=self._reader)  # fmt: skip
