"""``JobRunner``: runs the jobs a worker claimed and settles them.

The claim loop (``workers.runtime``) decides what to ask for and which of the
claimed jobs may run; from there on a job is this side's: a handler thread or the
event loop runs it through the middleware, the lease monitor may time it out, and
its settlement goes to the settle thread in a batch. The two sides share the
in-flight table, whose ``decide`` lets exactly one of them settle a job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial

from jobcore.results import ResultEncoder
from schemas.lease_answer import LeaseAnswer
from workers.app import App
from workers.async_slots import AsyncSlots
from workers.batcher import SettleBatcher
from workers.client import LeaseKeeperClient
from workers.decoding import Runnable
from workers.errors import JOB_TIMEOUT, Failure
from workers.execution import EventLoopThread, call_async, call_sync, log_outcome
from workers.handler_threads import HandlerThreads
from workers.inflight import Held, InFlight
from workers.messages import WorkerSettlement
from workers.middleware import MiddlewareChain
from workers.tracing import default_middleware

log = logging.getLogger(__name__)


class JobRunner:
    """Handler threads, the event loop and the settle thread of one worker."""

    def __init__(
        self,
        app: App,
        client: LeaseKeeperClient,
        table: InFlight,
        results: ResultEncoder,
        *,
        concurrency: int,
        settle_interval_s: float,
        settle_batch: int,
        relaxed: Callable[[], bool],
        relaxed_settle_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.app = app
        self.middleware = MiddlewareChain((*default_middleware(), *app.middleware))
        self._table = table
        self._results = results  # return values' bytes
        self._clock = clock
        self._async_slots = AsyncSlots(concurrency)
        self._pool: HandlerThreads[tuple[Held, Runnable]] = HandlerThreads(
            concurrency, self._run_sync_item, name="worker-handler"
        )
        self._loop = EventLoopThread()
        self.batcher: SettleBatcher[Held] = SettleBatcher(
            client,
            self._answered,
            interval_s=settle_interval_s,
            max_batch=settle_batch,
            clock=clock,
            relaxed=relaxed,
            relaxed_interval_s=relaxed_settle_s,
            taker_waiting=table.claim_waits_for_finished,
        )

    def start(self) -> None:
        if self.app.has_async_handlers:
            self._loop.start()
        self._pool.start()
        self.batcher.start()

    def submit(self, jobs: list[tuple[Held, Runnable]], first: list[tuple[Held, Runnable]]) -> None:
        """Queue a claimed batch for the handler threads, ``first`` ahead of those waiting."""
        self._pool.submit(jobs, first=first)

    def dispatch_async(self, held: Held, job: Runnable, *, first: bool = False) -> None:
        try:
            future = self._loop.submit(self._run_async(held, job, first))
        except RuntimeError:
            self.settle_now(held, WorkerSettlement.release(held.ref))
            return
        held.cancel = future.cancel

    def _run_sync_item(self, item: tuple[Held, Runnable]) -> None:
        self._run_sync(*item)

    def _run_sync(self, held: Held, job: Runnable) -> None:
        if not self._table.start(held, now=self._clock(), timeout_s=job.timeout_s):
            return
        call = partial(call_sync, job.handler, job.ctx, job.payload, held, self._results)
        self._finish(held, self.middleware.run_sync(job.ctx, call))

    async def _run_async(self, held: Held, job: Runnable, first: bool = False) -> None:
        await self._async_slots.acquire(first=first)  # prefetched jobs wait here for a slot
        try:
            if not self._table.start(held, now=self._clock(), timeout_s=job.timeout_s):
                return
            call = partial(call_async, job.handler, job.ctx, job.payload, held, self._results)
            self._finish(held, await self.middleware.run_async(job.ctx, call))
        finally:
            self._async_slots.release()

    def _finish(self, held: Held, failure: Failure | None) -> None:
        """Settle a job whose handler returned, unless its lease is gone or it was settled."""
        try:
            if held.ctx.is_cancelled:
                if self._table.decide(held):
                    log.warning(
                        "job %s finished after losing its lease (%s); not settling it",
                        held.ctx.job_id,
                        held.ctx.lease_lost_reason,
                    )
                    self._table.answer(held)
            elif self._table.decide(held):
                log_outcome(held.ctx, failure)
                ref = held.ref
                run_s = 0.0 if held.started_at is None else self._clock() - held.started_at
                outcome = (  # with the last progress, which no heartbeat may have carried
                    WorkerSettlement.ack(ref, run_s, held.result, held.ctx.last_progress)
                    if failure is None
                    else WorkerSettlement.nack(ref, failure, run_s, held.ctx.last_progress)
                )
                self.batcher.put(outcome, held)
        finally:
            self._table.finish(held)

    def settle_now(self, held: Held, settlement: WorkerSettlement) -> None:
        """Settle a job that will not run (undecodable, released) and free its thread."""
        if self._table.decide(held):
            self.batcher.put(settlement, held)
        self._table.finish(held)

    def timed_out(self, held: Held) -> None:
        if not self._table.decide(held):
            return
        limit = held.timeout_s or 0.0
        held.ctx.mark_lease_lost(f"timed out after {limit:g}s")
        if held.cancel is not None:
            held.cancel()
        message = f"handler for {held.ctx.type!r} ran longer than timeout_s={limit:g}"
        log.warning("job %s (lease %s): %s", held.ctx.job_id, held.ref.lease_id, message)
        failure = Failure(error_class=JOB_TIMEOUT, message=message)
        self.batcher.put(WorkerSettlement.nack(held.ref, failure), held)

    def _answered(
        self, batch: Sequence[tuple[WorkerSettlement, Held]], results: list[LeaseAnswer] | None
    ) -> None:
        by_id = {} if results is None else {result.lease_id: result for result in results}
        for settlement, held in batch:
            if results is not None:
                result = by_id.get(settlement.ref.lease_id)
                accepted = result is not None and result.ok
                if not accepted:
                    log.warning(
                        "leasekeeper refused %s of job %s (lease %s): %s",
                        settlement.outcome,
                        held.ctx.job_id,
                        settlement.ref.lease_id,
                        result.reason if result is not None else "no answer for this lease",
                    )
                self.app.notify_settled(held.ctx, str(settlement.outcome), accepted)
            self._table.answer(held)

    def release_overdue(self, grace_s: float) -> None:
        """Hand back jobs still running after the grace period; their results are dropped."""
        for held in self._table.running():
            if not self._table.decide(held):
                continue
            reason = f"worker shutting down: grace period of {grace_s:g}s ran out"
            held.ctx.mark_lease_lost(reason)
            if held.cancel is not None:
                held.cancel()
            log.warning("job %s still running at shutdown; releasing it", held.ctx.job_id)
            self.batcher.put(WorkerSettlement.release(held.ref), held)

    def close(self, flush_s: float) -> int:
        """Flush the settlements and stop the threads; the handlers still running (they
        outlived the grace period) are left behind, and their count returned."""
        self.batcher.close(flush_s)
        abandoned = len(self._table.running())
        self._pool.shutdown(wait=abandoned == 0)
        self._loop.stop(timeout=1.0)
        return abandoned
