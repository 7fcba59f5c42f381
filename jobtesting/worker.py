"""A worker's execution path for one claimed job, in the calling thread.

The same steps a ``workers.runtime.Worker`` takes for each lease (``prepare``: decode
and find the handler; the middleware chain; ``call_sync``/``call_async``, which
classify what the handler raised into a ``Failure``; the settlement), without its
threads, heartbeats and settle batching: the drain runs one job at a time, so
nothing else can happen while a handler runs.

Time limits are on the fake clock, which only a handler itself can move while it
runs: when it moves the clock past its ``timeout_s``, its lease is marked lost (an
``async def`` handler is cancelled, as the runtime cancels it) and the attempt is
settled as ``JobTimeout``; a sync handler that goes on is reported, not killed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from jobcore.results import DEFAULT_RESULT_BYTES, ResultEncoder
from jobtesting.clock import FakeClock
from jobtesting.report import Attempt
from workers.app import App
from workers.context import JobContext
from workers.decoding import EnvelopeDecoder, Runnable, Unrunnable, job_types, prepare
from workers.errors import JOB_TIMEOUT, Failure
from workers.execution import Returned, call_async, call_sync
from workers.messages import ClaimedJob, WorkerSettlement
from workers.middleware import MiddlewareChain
from workers.tracing import default_middleware

__all__ = ["MemoryWorker", "Ran"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Ran:
    """What running one lease came to: the settlement to send, what to report, and
    the job's context (its ``job_id`` empty for an envelope that could not be read)."""

    ctx: JobContext
    settlement: WorkerSettlement
    attempt: Attempt


class MemoryWorker:
    def __init__(self, app: App, decoder: EnvelopeDecoder, clock: FakeClock) -> None:
        self.app = app
        self._decoder = decoder
        self._clock = clock
        self._middleware = MiddlewareChain(
            (*default_middleware(), *app.middleware), clock=clock.monotonic
        )
        self.types = job_types(app, decoder)
        # The worker's default cap on a return value (``workers run --max-result-bytes``),
        # and its result schemas, as a worker encodes return values.
        self.results = ResultEncoder.of(decoder, DEFAULT_RESULT_BYTES)

    def start(self) -> None:
        self._middleware.worker_start(self.app)

    def stop(self) -> None:
        self._middleware.worker_stop(self.app)

    def run(self, lease: ClaimedJob) -> Ran:
        prepared = prepare(self.app, self._decoder, lease)
        ctx = prepared.ctx
        if isinstance(prepared, Unrunnable):
            # Only types this app runs are claimed, so this is a record that cannot be
            # decoded: nacked (permanently), as the runtime does.
            return Ran(ctx=ctx, settlement=WorkerSettlement.nack(lease.ref, prepared.failure),
                       attempt=_attempt(lease.attempt, prepared.failure))  # fmt: skip
        started = self._clock.monotonic()
        timeout = _Timeout(prepared, started)
        cancel = (
            self._clock.call_at(timeout.deadline, timeout.fire)
            if prepared.timeout_s is not None
            else None
        )
        slot = Returned()
        try:
            failure = self._call(prepared, timeout, slot)
        finally:
            if cancel is not None:
                cancel()
        finished = self._clock.monotonic()
        run_s = finished - started
        if timeout.fired:
            limit = prepared.timeout_s or 0.0
            message = f"handler for {ctx.type!r} ran longer than timeout_s={limit:g}"
            failure = Failure(error_class=JOB_TIMEOUT, message=message)
            attempt = _attempt(lease.attempt, failure, overran=finished - timeout.deadline)
            return Ran(ctx=ctx, settlement=WorkerSettlement.nack(lease.ref, failure),
                       attempt=attempt)  # fmt: skip
        settlement = (
            WorkerSettlement.ack(lease.ref, run_s, slot.result)
            if failure is None
            else WorkerSettlement.nack(lease.ref, failure, run_s)
        )
        return Ran(ctx=ctx, settlement=settlement,
                   attempt=_attempt(lease.attempt, failure))  # fmt: skip

    def _call(self, job: Runnable, timeout: _Timeout, slot: Returned) -> Failure | None:
        limit = self.results
        if not job.handler.is_async:
            return self._middleware.run_sync(
                job.ctx, partial(call_sync, job.handler, job.ctx, job.payload, slot, limit)
            )
        call = partial(call_async, job.handler, job.ctx, job.payload, slot, limit)

        async def main() -> Failure | None:
            task = asyncio.ensure_future(self._middleware.run_async(job.ctx, call))
            timeout.cancel_with(asyncio.get_running_loop(), task)
            try:
                return await task
            except asyncio.CancelledError:  # cancelled before it started
                return None

        return _run_coroutine(main())


class _Timeout:
    """Marks the lease lost when the handler moves the clock past its time limit."""

    def __init__(self, job: Runnable, started: float) -> None:
        self._ctx = job.ctx
        self._limit = job.timeout_s or 0.0
        self.deadline = started + self._limit
        self.fired = False
        self._cancel: Callable[[], object] | None = None

    def cancel_with(self, loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]) -> None:
        self._cancel = partial(loop.call_soon_threadsafe, task.cancel)

    def fire(self) -> None:
        self.fired = True
        self._ctx.mark_lease_lost(f"timed out after {self._limit:g}s")
        if self._cancel is not None:
            self._cancel()


def _attempt(number: int, failure: Failure | None, overran: float = 0.0) -> Attempt:
    if failure is None:
        return Attempt(attempt=number)
    return Attempt(
        attempt=number,
        error_class=failure.error_class,
        message=failure.message,
        retry_after_s=failure.retry_after_s,
        permanent=failure.permanent,
        timed_out=failure.error_class == JOB_TIMEOUT,
        ran_past_timeout_s=max(0.0, overran),
    )


def _run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end on a private event loop: in this thread, or in a helper
    thread when this one already runs a loop (a test of an async web app)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    found: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            found.append(asyncio.run(coro))
        except BaseException as exc:
            errors.append(exc)

    helper = threading.Thread(target=run, name="jobtesting-async-handler")
    helper.start()
    helper.join()
    if errors:
        raise errors[0]
    return found[0]
