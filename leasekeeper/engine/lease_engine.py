"""The lease engine: the leasekeeper's state machine, free of Kafka and gRPC.

This module builds the parts, the features and the ports over them, all under one
lock. Callers use the ports, each a few methods for one caller:

- ``partitions`` (``PartitionPort``): the rebalancer assigns and revokes;
- ``fetch`` (``FetchPort``): fetched records become ready jobs, notes or copies;
- ``workers`` (``WorkerPort``): claim, heartbeat, settle; expiry and unhandled types;
- ``copies`` (``CopyPort``): the outbox takes copies and reports what became of them;
- ``commits`` (``CommitPort``): commit positions and what Kafka accepted;
- ``overflow``, ``breakers``, ``limits``, ``ordering``: each feature's own port, in
  its folder;
- ``views`` (``ViewPort``): what ``inspect``, metrics and the dashboard read.

Each part holds one kind of state and its invariants, in its own module: the
``window`` (ready jobs, dispatch policy, the delayed heap), the ``partition_book``
(per partition the commit tracker, generations, commit positions), ``intake`` (what
becomes of a fetched record), the ``lease_core`` (claim, heartbeat, settle, expire),
the ``retry_path``, ``unhandled``, ``parking`` and the ``copy_queue``. The core calls
features only through ``core/hooks.py``; this module is the one place that builds
both and registers the features, in order, at each hook.

One lock guards all parts; every port's method is short, so contention stays low at
batches of tens to hundreds of jobs.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from leasekeeper.breaker.gate import BreakerGate
from leasekeeper.breaker.policy import BreakerBoard
from leasekeeper.breaker.port import BreakerPort
from leasekeeper.core.claimer import Claimers
from leasekeeper.core.clocks import now_ms
from leasekeeper.core.commit_port import CommitPort
from leasekeeper.core.context import Counters, EngineContext
from leasekeeper.core.control_state import ControlState
from leasekeeper.core.copy_port import CopyPort
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.deliveries import Deliveries
from leasekeeper.core.dispatch_policy import DispatchPolicy
from leasekeeper.core.fetch_port import FetchPort
from leasekeeper.core.intake import Intake
from leasekeeper.core.job_reader import Decode, JobReader
from leasekeeper.core.lease_core import LeaseCore
from leasekeeper.core.leases import Pending
from leasekeeper.core.parking import Parking
from leasekeeper.core.partition_book import PartitionBook
from leasekeeper.core.partition_port import PartitionPort
from leasekeeper.core.resolved_ids import ResolvedIds
from leasekeeper.core.retry_budget import RetryBudget
from leasekeeper.core.retry_path import FailurePath
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.unhandled import UnhandledSweep
from leasekeeper.core.window import ReadyWindow
from leasekeeper.core.worker_port import WorkerPort
from leasekeeper.deferral.floods import FloodDeferral
from leasekeeper.deferral.port import DeferralPort
from leasekeeper.engine.config import EngineConfig
from leasekeeper.fairness.weighted import ready_policy
from leasekeeper.limits.admission import LimitDispatch
from leasekeeper.limits.port import LimitsPort
from leasekeeper.limits.rate_limit import RateLimits
from leasekeeper.ordering.gate import OrderingGate
from leasekeeper.ordering.keys import KeyBook
from leasekeeper.ordering.port import OrderingPort
from leasekeeper.overflow.moves import OverflowMoves
from leasekeeper.overflow.policy import OverflowLane
from leasekeeper.overflow.port import OverflowPort
from leasekeeper.views.engine_view import ViewPort
from schemas.vocabulary import ErrorClass

__all__ = ["UNKNOWN_JOB_TYPE", "Counters", "EngineConfig", "LeaseEngine"]

UNKNOWN_JOB_TYPE = ErrorClass.UNKNOWN_JOB_TYPE.value


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
        which ready job is dispatched next (``fairness.weighted.ready_policy`` by default).
        ``decode`` reads a job's envelope when a copy rewrites it (jobs offered by
        their headers only); jobs offered decoded need none. ``sleep`` is how a
        waiting claim sleeps on its condition (``Condition.wait``; a test that fakes
        ``monotonic`` lets its time pass there)."""
        self.control = control = control or ControlState()
        self.counters = counters = Counters()
        budget = budget or RetryBudget()
        lock = threading.RLock()
        claimers = self._claimers = Claimers(lock=lock, sleep=sleep)
        reader = JobReader(decode)
        resolved = ResolvedIds(max_ids=config.resolved_ids, window_s=config.resolved_window_s)
        ctx = EngineContext(config=config, store=store, counters=counters,
                            control=control, clock=clock, monotonic=monotonic,
                            reader=reader, resolved=resolved)  # fmt: skip
        book = PartitionBook(store=store, counters=counters, max_span=config.max_span)
        if policy is None:  # not ``or``: an empty policy is falsy (it has a length)
            policy = ready_policy(config.class_weights, config.tenants)
        window = ReadyWindow(records=config.window_records, max_bytes=config.window_bytes,
                             wake=claimers.work_arrived, policy=policy)  # fmt: skip
        keys = KeyBook(on_dead=config.on_dead, full=reader.full, keep_jobs=config.lane_jobs_here)
        ordering = OrderingGate(keys=keys, book=book, window=window, store=store,
                                counters=counters, reader=reader,
                                add=lambda requests: copies.add(requests),
                                now_ms=lambda: now_ms(clock))  # fmt: skip
        copies = CopyQueue(book=book, status_records=config.status_records,
                           route=ordering.route, clock=monotonic)  # fmt: skip
        rng = rng or random.Random()
        failures = FailurePath(config=config, budget=budget, rng=rng, clock=clock,
                               reader=reader)  # fmt: skip
        overflow = OverflowMoves(lane=OverflowLane(share=config.overflow_share), book=book,
                                 window=window, copies=copies, store=store,
                                 reader=reader)  # fmt: skip
        # One defence per flood: with the overflow lane on, a flood moves aside instead.
        defer = config.defer_floods and config.overflow_share <= 0
        deferral = FloodDeferral(book=book, window=window, now_ms=lambda: now_ms(clock),
                                 enabled=defer)  # fmt: skip
        intake = Intake(ctx=ctx, book=book, window=window, copies=copies,
                        lines=ordering, hooks=(overflow, deferral),
                        hold=deferral)  # fmt: skip
        limits = LimitDispatch(limits=RateLimits(config.rate_limits, monotonic),
                               window=window, book=book, window_records=config.window_records,
                               monotonic=monotonic, reader=reader)  # fmt: skip
        parking = Parking(book=book, counters=counters, clock=clock, reader=reader)
        breakers = BreakerGate(board=BreakerBoard(config.breakers), parking=parking,
                               retries=config.retries, monotonic=monotonic, rng=rng)  # fmt: skip
        gates = (limits, breakers)
        core = LeaseCore(ctx=ctx, book=book, window=window, intake=intake, failures=failures,
                         budget=budget, copies=copies, gates=gates,
                         ordering=ordering)  # fmt: skip
        unhandled = UnhandledSweep(ctx=ctx, book=book, window=window, failures=failures)
        deliveries = Deliveries(copies=copies, book=book, reader=reader, clock=clock,
                                hooks=(overflow, ordering, intake))  # fmt: skip
        self._store = store
        self._book, self._overflow, self._limits = book, overflow, limits
        self._ordering, self._unhandled = ordering, unhandled

        self.partitions = PartitionPort(lock=lock, book=book, window=window, core=core,
                                        hooks=(overflow, ordering, limits,
                                               deferral))  # fmt: skip
        self.fetch = FetchPort(lock=lock, intake=intake, book=book, window=window,
                               copies=copies, control=control, gates=gates, lines=ordering,
                               clock=clock, window_records=config.window_records)  # fmt: skip
        self.commits = CommitPort(lock=lock, book=book, claimers=claimers, hooks=(overflow,),
                                  max_uncommitted=config.max_uncommitted)  # fmt: skip
        self.workers = WorkerPort(lock=lock, claimers=claimers, core=core, window=window,
                                  copies=copies, gates=gates, unhandled=unhandled,
                                  commits=self.commits, class_weights=config.class_weights,
                                  clock=clock, monotonic=monotonic)  # fmt: skip
        self.copies = CopyPort(lock=lock, copies=copies, book=book, deliveries=deliveries)
        self.overflow = OverflowPort(lock=lock, moves=overflow, book=book)
        self.deferral = DeferralPort(lock=lock, deferral=deferral, fetch=self.fetch,
                                     read_past_cap=config.read_past_cap)  # fmt: skip
        self.breakers = BreakerPort(lock=lock, gate=breakers, window=window, copies=copies,
                                    clock=clock, monotonic=monotonic)  # fmt: skip
        self.limits = LimitsPort(lock=lock, dispatch=limits, copies=copies, clock=clock)
        self.ordering = OrderingPort(lock=lock, gate=ordering)
        self.views = ViewPort(lock=lock, class_weights=config.class_weights,
                              tenants=config.tenants, book=book, window=window, core=core,
                              budget=budget, counters=counters, unhandled=unhandled,
                              control=control, store=store, reader=reader,
                              overflow=overflow.lane.backlog, clock=clock,
                              monotonic=monotonic)  # fmt: skip
        self._lock = lock

    def close(self) -> None:
        """Lease nothing more; waiting claims return empty (a shutdown drains)."""
        with self._lock:
            self._claimers.close()
