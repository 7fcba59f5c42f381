"""``Worker``: claims jobs from a leasekeeper, runs their handlers, settles them.

Threads and what they do:

- the caller of ``run()``: the claim loop, asking for as many jobs as there
  are free slots, in one Claim call;
- ``concurrency`` handler threads for ``def`` handlers, one event loop thread for
  ``async def`` handlers (at most ``concurrency`` of them running at once);
- the lease monitor: batched heartbeats and handler time limits;
- the settle thread: batched acks, nacks and releases.

The claim loop lives here; the handler threads, the event loop and the settle
thread belong to ``workers.job_runner``, which runs and settles what it claimed.

``stop()`` (from another thread: see ``workers.supervisor``) stops claiming,
releases jobs that have not started, and lets running ones finish within
``shutdown_grace_s``; ``run()`` then returns.

Prefetch: a worker holds up to ``prefetch x concurrency`` leases (default 2x,
like Celery's prefetch multiplier), and runs ``concurrency`` of them at a time;
the rest wait in line for a free handler. A job that finishes finds the next one
already here, instead of waiting for its settle to be answered and a claim to
come back. Waiting jobs are heartbeated like running ones and released on
shutdown. Their attempt is counted at claim like every job's (invariant 4). A
claim says how many of its jobs go to idle handlers (they count as started at
once), and the worker reports the start of the others in its heartbeats (a job
still running ``START_REPORT_S`` after it started): when the worker dies, a
prefetched job that never started gets its attempt back after its lease expires
(see ``leasekeeper.core.started_only``, which bounds the refunds so that a job that
kills its worker still reaches the DLQ). Its ``timeout_s`` starts when it starts.
With ``prefetch=1`` no job waits here and every claim counts as started.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

from jobcore.config import DEFAULT_LEASE_S
from jobcore.results import DEFAULT_RESULT_BYTES, ResultEncoder
from workers.app import App
from workers.batcher import RELAXED_INTERVAL_S
from workers.client import (
    LeaseKeeperClient,
    LeaseKeeperRejected,
    LeaseKeeperUnavailable,
    ReconnectBackoff,
)
from workers.decoding import EnvelopeDecoder, Runnable, Unrunnable, job_types, prepare
from workers.inflight import Held, InFlight, Phase
from workers.job_runner import JobRunner
from workers.messages import ClaimedJob, WorkerSettlement
from workers.monitor import LeaseMonitor

log = logging.getLogger(__name__)

_SETTLE_FLUSH_S = 10.0
# How long a job runs before its start is reported in a heartbeat of its own. A
# job that finishes sooner is settled instead (no extra call); a worker that dies
# within it makes the job look unstarted, which the leasekeeper's bounded refund
# allows for.
START_REPORT_S = 0.02
DEFAULT_PREFETCH = 2
# How long a freed slot may wait for more before it is claimed, while jobs still wait
# in the worker for a handler (once none waits, the slots are claimed at once): two
# settle intervals, so one claim carries the slots of about two settle answers. It
# bounds what a critical job waiting in the leasekeeper loses to it.
CLAIM_GATHER_S = 0.01


def refill_at_for(concurrency: int, prefetch: int) -> int:
    """Free slots worth a claim at once while jobs still wait in the worker for a
    handler: half the leases the worker can hold. A claim after every settle answer carried
    the few slots that answer freed (four 10 ms jobs of an 8-slot worker per 5 ms
    settle); short of this many, a claim gathers for up to ``CLAIM_GATHER_S``."""
    return max(1, concurrency * prefetch // 2)


def settle_batch_for(concurrency: int, prefetch: int) -> int:
    """The most settlements one Settle carries by default: every lease the worker can
    hold, so the jobs that finish within one settle interval go in one call. A fixed
    100 split each round of a 64-slot worker's 128 leases into a settle of 100 and
    one of 28, and the claims that follow the answers the same way: twice the round
    trips, each a wake-up of the leasekeeper's RPC threads."""
    return max(1, concurrency * prefetch)


class Worker:
    """One worker process's runtime; ``run()`` blocks until ``stop()`` and the drain finish."""

    def __init__(
        self,
        app: App,
        client: LeaseKeeperClient,
        *,
        decoder: EnvelopeDecoder,
        concurrency: int = 8,
        prefetch: int = DEFAULT_PREFETCH,
        worker_id: str | None = None,
        claim_wait_ms: int = 1000,
        shutdown_grace_s: float = 30.0,
        settle_interval_s: float = 0.005,
        settle_batch: int | None = None,
        claim_gather_s: float = CLAIM_GATHER_S,
        relaxed_settle_s: float = RELAXED_INTERVAL_S,
        heartbeats: bool = True,
        max_result_bytes: int = DEFAULT_RESULT_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.worker_id = worker_id or client.worker_id
        self.shutdown_grace_s = shutdown_grace_s
        self._client = client
        self._decoder = decoder
        self._claim_wait_ms = claim_wait_ms
        self._clock = clock
        self._stopping = threading.Event()
        self._monitor_stop = threading.Event()
        self._rng = random.Random()
        self._started = False
        self._fatal: LeaseKeeperRejected | None = None
        self._abandoned = 0
        self._types = job_types(app, decoder)
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {prefetch}")
        self._concurrency, self._prefetch = concurrency, prefetch
        # Only a worker with jobs waiting in it, whose heartbeats say which started.
        self._reports_started = prefetch > 1 and heartbeats
        # The table's slots are leases in hand; handler threads bound what runs.
        self._table = InFlight(concurrency=concurrency * prefetch)
        # While jobs wait here for a handler, a claim gathers free slots for up to
        # ``claim_gather_s``, until half the leases are free or until none waits.
        self._refill_at = refill_at_for(concurrency, prefetch)
        self._claim_gather_s = claim_gather_s
        self._runner = JobRunner(
            app,
            client,
            self._table,
            ResultEncoder.of(decoder, max_result_bytes),
            concurrency=concurrency,
            settle_interval_s=settle_interval_s,
            settle_batch=settle_batch or settle_batch_for(concurrency, prefetch),
            relaxed=self._has_room,
            relaxed_settle_s=relaxed_settle_s,
            clock=clock,
        )
        self._batcher = self._runner.batcher
        self._monitor = LeaseMonitor(
            table=self._table,
            client=client,
            on_timeout=self._runner.timed_out,
            stop=self._monitor_stop,
            clock=clock,
            heartbeats=heartbeats,
            start_report_s=START_REPORT_S if self._reports_started else None,
        )

    @property
    def concurrency(self) -> int:
        """Handlers run at once."""
        return self._concurrency

    @property
    def prefetch(self) -> int:
        """Leases held per handler slot: ``concurrency x prefetch`` in hand at most."""
        return self._prefetch

    @property
    def in_hand(self) -> int:
        """Leases held right now: claimed and not yet settled."""
        return len(self._table)

    @property
    def abandoned(self) -> int:
        """Handlers still running when ``run()`` returned (they outlived the grace period)."""
        return self._abandoned

    def stop(self) -> None:
        """Ask ``run()`` to drain and return; safe from any thread, idempotent."""
        if not self._stopping.is_set():
            log.info("worker %s stopping", self.worker_id)
        self._stopping.set()
        self._table.wake()

    def run(self) -> None:
        """Claim and run jobs until ``stop()``; raise ``LeaseKeeperRejected`` if refused."""
        if self._started:
            raise RuntimeError("a Worker runs once; build a new one")
        self._started = True
        self._runner.start()
        self._monitor.start()
        self._runner.middleware.worker_start(self.app)
        log.info(
            "worker %s claiming from %s (concurrency %d, prefetch %d, handlers: %s)",
            self.worker_id,
            self._client.target,
            self.concurrency,
            self.prefetch,
            ", ".join(self._types.runnable) or "none",
        )
        for job_type in self._types.missing_schema:
            log.warning(
                "not claiming job type %r: app %r has a handler but no payload schema for it "
                "(add %s.avsc to a directory given with --schema-path or JOBS_SCHEMA_PATH)",
                job_type,
                self.app.name,
                job_type,
            )
        try:
            self._claim_loop()
        finally:
            self._drain()
            self._runner.middleware.worker_stop(self.app)
        if self._fatal is not None:
            raise self._fatal

    def _claim_loop(self) -> None:
        failures = 0
        pause = ReconnectBackoff()
        while not self._stopping.is_set():
            free = self._table.wait_free(
                self._stopping,
                timeout=1.0,
                enough=self._refill_at,
                gather_s=self._claim_gather_s,
                finished_count=True,
            )
            if free == 0 or self._stopping.is_set():
                continue
            if self._settle_and_claim():
                continue
            free = self._table.free()
            if free == 0:  # finished jobs whose settle thread's answer frees their slots
                free = self._table.wait_free(self._stopping, timeout=1.0)
            if free == 0 or self._stopping.is_set():
                continue
            try:
                leases = self._client.claim(
                    free,
                    self._claim_wait_ms,
                    self._types.runnable,
                    reports_started=self._reports_started,
                    start_now=self._idle_handlers(),
                )
            except LeaseKeeperUnavailable as exc:
                failures += 1
                log.debug("claim failed (%d in a row): %s", failures, exc)
                if not exc.reconnecting:
                    self._stopping.wait(pause.delay(failures, self._rng))
                continue
            except LeaseKeeperRejected as refused:
                # Its own name: compiled, one name has one type per function.
                log.error("leasekeeper refused this worker; stopping: %s", refused)
                self._fatal = refused
                self.stop()
                return
            failures = 0
            self._accept(leases, free)

    def _settle_and_claim(self) -> bool:
        """Send the waiting settlements and refill the slots they free in one call (one
        round trip a batch instead of two); True when it brought jobs. Settlements
        it could not send go back to the settle thread, which retries them.

        Only while the process is short of room: with half its leases free, a claim
        needs no freed slots, and taking the settle thread's batch would add a
        call per claim where jobs trickle in (each claim then long-polls anyway)."""
        if self._has_room():
            return False
        items = self._batcher.take()
        if not items:
            return False
        freed = sum(1 for _, held in items if held.phase is Phase.DONE)
        try:
            results, leases = self._client.settle_and_claim(
                [settlement for settlement, _ in items],
                self._table.free() + freed,
                self._types.runnable,
                reports_started=self._reports_started,
                start_now=self._idle_handlers(),
            )
        except (LeaseKeeperUnavailable, LeaseKeeperRejected):
            self._batcher.give_back(items)
            return False
        self._batcher.answered(items, results)
        if not leases:
            return False
        self._accept(leases, self._table.free())
        return True

    def _has_room(self) -> bool:
        """Half the leases free: what a claim takes at once. With that much room a
        settle need not hurry to free slots (``SettleBatcher``'s relaxed interval)."""
        return self._table.free() >= self._refill_at

    def _idle_handlers(self) -> int:
        """Handlers with nothing to run or wait for: the first jobs of a claim start on
        them at once (in claim order), so they count as started at claim."""
        return max(0, self._concurrency - self._table.waiting_or_running())

    def _accept(self, leases: Sequence[ClaimedJob], free: int) -> None:
        if len(leases) > free:
            log.warning("leasekeeper sent %d jobs for %d free slots", len(leases), free)
        sync: list[tuple[Held, Runnable]] = []
        first: list[tuple[Held, Runnable]] = []
        for index, lease in enumerate(leases):
            prepared = prepare(self.app, self._decoder, lease)
            interval = (lease.lease_s if lease.lease_s > 0 else DEFAULT_LEASE_S) / 3
            held = self._table.add(lease, prepared.ctx, now=self._clock(), beat_interval_s=interval)
            if self._stopping.is_set() or index >= free:
                self._runner.settle_now(held, WorkerSettlement.release(lease.ref))
            elif isinstance(prepared, Unrunnable) and prepared.release:
                log.warning(
                    "job %s (lease %s): %s; released for a worker that has one",
                    prepared.ctx.job_id,
                    lease.ref.lease_id,
                    prepared.failure.message,
                )
                self._runner.settle_now(held, WorkerSettlement.release(lease.ref))
            elif isinstance(prepared, Unrunnable):
                log.warning(
                    "job %s (lease %s) cannot run: %s: %s",
                    prepared.ctx.job_id,
                    lease.ref.lease_id,
                    prepared.failure.error_class,
                    prepared.failure.message,
                )
                self._runner.settle_now(held, WorkerSettlement.nack(lease.ref, prepared.failure))
            elif not prepared.handler.is_async:
                (first if lease.run_first else sync).append((held, prepared))
            else:
                self._runner.dispatch_async(held, prepared, first=lease.run_first)
        if not self._has_room():
            self._batcher.hurry()  # the slots its settles free are wanted now
        if sync or first:
            # The claimed batch at once, one tuple a job; a critical job ahead of the
            # jobs claimed earlier that wait for a handler thread.
            self._runner.submit(sync, first)

    def _drain(self) -> None:
        """Release unstarted jobs, wait out the grace period, flush settlements, stop threads."""
        self.stop()
        unstarted = self._table.take_unstarted()
        for held in unstarted:
            self._batcher.put(WorkerSettlement.release(held.ref), held)
        if unstarted:
            log.info("released %d job(s) that had not started", len(unstarted))
        deadline = self._clock() + self.shutdown_grace_s
        running = self._table.running()
        if running:
            log.info(
                "waiting up to %.0fs for %d running job(s)", self.shutdown_grace_s, len(running)
            )
        self._table.wait_until(_none_running, max(0.0, deadline - self._clock()))
        self._runner.release_overdue(self.shutdown_grace_s)
        self._monitor_stop.set()
        self._table.wake()
        self._monitor.join(_SETTLE_FLUSH_S)
        self._abandoned = self._runner.close(_SETTLE_FLUSH_S)
        log.info("worker %s stopped", self.worker_id)


def _none_running(held: list[Held]) -> bool:
    return not any(h.phase is Phase.RUNNING for h in held)
