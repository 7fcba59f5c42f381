"""One attempt of a job, run inline through the worker's own execution path.

The job goes where a claimed one goes in a worker: ``workers.decoding.prepare``
finds the handler by type and decodes the payload by its schema, and the handler
runs inside the worker's middleware chain (``workers.middleware``), through the
worker's own ``call_sync`` / ``call_async`` which classify what it raised
(``Retry``, ``Permanent``, any exception). Only the leasekeeper's part (when to
try again, when a job is dead) is the caller's (``jobtesting.eager_mode``).

``async def`` handlers run on a private event loop in a helper thread, as a
worker runs them on its loop thread, and the caller blocks until they finish: an
enqueue from inside a running loop (a FastAPI endpoint) cannot run a coroutine
on its own loop without returning to it first.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from jobcore.results import DEFAULT_RESULT_BYTES, ResultEncoder
from workers.app import App
from workers.decoding import EnvelopeDecoder, Runnable, Unrunnable, prepare
from workers.errors import JOB_TIMEOUT, Failure
from workers.execution import Returned, call_async, call_sync
from workers.messages import ClaimedJob, LeaseRef
from workers.middleware import MiddlewareChain

__all__ = ["Attempt", "PrivateLoop", "lease_for", "run_attempt"]

_T = TypeVar("_T")
# A handler's return value is checked as a worker checks it (JSON, the default cap) and
# dropped: eager mode has no results topic to write it to.
RESULT_LIMIT = DEFAULT_RESULT_BYTES


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """How one attempt ended: ``error`` is None when the handler succeeded, else the
    classified failure the worker would have nacked with (``retry_after_s`` is what
    ``Retry(after=)`` asked for; ``JobTimeout`` a handler that ran past its
    ``timeout_s``). ``duration_s`` is the handler's own run time."""

    number: int
    error: Failure | None
    duration_s: float

    @property
    def timed_out(self) -> bool:
        return self.error is not None and self.error.error_class == JOB_TIMEOUT


class PrivateLoop:
    """An asyncio loop of its own on a daemon thread, made when first needed.

    A handler that enqueues inline from this loop (a job that enqueues a job) gets
    a loop of its own for that call: blocking this one on it would never finish.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run ``make()`` on the loop and wait for its result."""
        loop = self._started()
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is loop:
            nested = PrivateLoop()
            try:
                return nested.run(make)
            finally:
                nested.close()
        return asyncio.run_coroutine_threadsafe(make(), loop).result()

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=_serve, args=(loop, ready), name="eager-asyncio", daemon=True
                )
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop


def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(ready.set)
    try:
        loop.run_forever()
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run_attempt(
    *,
    app: App,
    decoder: EnvelopeDecoder,
    chain: MiddlewareChain,
    loop: PrivateLoop,
    lease: ClaimedJob,
) -> tuple[Runnable | Unrunnable, Attempt]:
    """Prepare ``lease`` as a worker does and, when it can run, run its handler once."""
    prepared = prepare(app, decoder, lease)
    if isinstance(prepared, Unrunnable):
        return prepared, Attempt(number=lease.attempt, error=prepared.failure, duration_s=0.0)
    started = time.perf_counter()
    results = ResultEncoder.of(decoder, RESULT_LIMIT)
    if prepared.handler.is_async:
        failure = loop.run(partial(_run_async, chain, prepared, results))
    else:
        failure = _run_sync(chain, prepared, results)
    duration = time.perf_counter() - started
    return prepared, Attempt(number=lease.attempt, error=failure, duration_s=duration)


def lease_for(
    *,
    job_id: str,
    attempt: int,
    type: str,
    tenant_id: str,
    queue: str,
    payload: bytes,
    max_attempts: int,
    timeout_s: float,
    created_at_ms: int,
    trace: dict[str, str],
) -> ClaimedJob:
    """The lease a leasekeeper would hand out for this attempt (the job's fields in
    the claim, as today's leasekeeper sends them)."""
    return ClaimedJob(
        ref=LeaseRef(lease_id=f"eager-{job_id}-{attempt}", token="eager"),
        until_ms=0,
        attempt=attempt,
        envelope=b"",
        lease_s=0,
        job_id=job_id,
        type=type,
        tenant_id=tenant_id,
        queue=queue,
        payload=payload,
        max_attempts=max_attempts,
        timeout_s=timeout_s,
        created_at_ms=created_at_ms,
        trace=trace,
    )


def _timeout_failure(job: Runnable) -> Failure:
    message = f"handler for {job.ctx.type!r} ran longer than timeout_s={job.timeout_s:g}"
    return Failure(error_class=JOB_TIMEOUT, message=message)


def _run_sync(chain: MiddlewareChain, job: Runnable, results: ResultEncoder) -> Failure | None:
    """A sync handler cannot be stopped: at its time limit its lease is marked lost (a
    handler polling ``ctx.lease_lost`` stops early), and what it returns is dropped
    for a ``JobTimeout``, as a worker drops it."""
    timer: threading.Timer | None = None
    if job.timeout_s is not None:
        timer = threading.Timer(
            job.timeout_s, job.ctx.mark_lease_lost, args=(f"timed out after {job.timeout_s:g}s",)
        )
        timer.daemon = True
        timer.start()
    try:
        call = partial(call_sync, job.handler, job.ctx, job.payload, Returned(), results)
        failure = chain.run_sync(job.ctx, call)
    finally:
        if timer is not None:
            timer.cancel()
    return _timeout_failure(job) if job.ctx.is_cancelled else failure


async def _run_async(
    chain: MiddlewareChain, job: Runnable, results: ResultEncoder
) -> Failure | None:
    """An async handler past its time limit is cancelled, as a worker cancels it, and
    awaited until it has unwound, so nothing of it runs after the enqueue returned."""
    call = partial(call_async, job.handler, job.ctx, job.payload, Returned(), results)
    task = asyncio.ensure_future(chain.run_async(job.ctx, call))
    done, _ = await asyncio.wait({task}, timeout=job.timeout_s)
    if done:
        return task.result()
    job.ctx.mark_lease_lost(f"timed out after {job.timeout_s:g}s")
    task.cancel()
    await asyncio.wait({task})
    return _timeout_failure(job)
