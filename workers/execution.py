"""Calling handlers: sync ones on threads, async ones on one event loop thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import threading
from collections.abc import Coroutine
from typing import Any, Protocol, cast

from jobcore.results import ResultEncoder, ResultNotSerialisable, ResultTooLarge
from workers.app import Handler
from workers.context import JobContext
from workers.errors import Failure, Permanent, classify

log = logging.getLogger(__name__)
# A job's outcome is logged under the runtime's name, where it was before.
outcomes = logging.getLogger("workers.runtime")


class ResultSlot(Protocol):
    """Where a handler's encoded return value waits for its ack: the worker's ``Held``
    (or a test harness's own); left empty when the handler returned None."""

    result: bytes


class Returned:
    """A ``ResultSlot`` of its own, for a caller that runs a handler without a ``Held``
    (the test harnesses)."""

    __slots__ = ("result",)

    def __init__(self) -> None:
        self.result = b""


class HandlerReturnedAwaitable(TypeError):
    """A plain ``def`` handler returned an awaitable; it would never run."""


def call_sync(
    handler: Handler,
    ctx: JobContext,
    payload: dict[str, Any],
    held: ResultSlot,
    results: ResultEncoder,
) -> Failure | None:
    """Run a ``def`` handler; None on success, else the classified failure. Its return
    value, encoded by ``results``, is kept on ``held`` for the ack.

    Catches ``BaseException`` on purpose: a ``SystemExit`` raised in a pool
    thread would end only that call, and the job must still be settled.
    """
    try:
        result = handler.func(ctx, payload)
        # Most handlers return None; ``isawaitable`` asks the ``Awaitable`` ABC.
        if result is not None:
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise HandlerReturnedAwaitable(
                    f"handler for {handler.job_type!r} returned an awaitable; "
                    "declare it `async def`"
                )
            held.result = kept(result, handler.job_type, results)
    except BaseException as exc:
        return classify(exc)
    return None


async def call_async(
    handler: Handler,
    ctx: JobContext,
    payload: dict[str, Any],
    held: ResultSlot,
    results: ResultEncoder,
) -> Failure | None:
    """Await an ``async def`` handler; None on success, else the classified failure.
    Its return value, encoded, is kept on ``held`` for the ack, as ``call_sync`` does.

    A ``CancelledError`` here means the runtime gave up on the job (timeout,
    shutdown) and already settled it, so the failure returned is discarded.
    """
    try:
        result = await cast(Coroutine[Any, Any, object], handler.func(ctx, payload))
        if result is not None:
            held.result = kept(result, handler.job_type, results)
    except asyncio.CancelledError as exc:
        return classify(exc)
    except Exception as exc:
        return classify(exc)
    return None


def kept(value: object, job_type: str, results: ResultEncoder) -> bytes:
    """A return value as the bytes its ack carries. One that cannot be carried fails the
    job as a permanent error (retrying would run the handler again for the same value),
    dead-lettered with the message that says what to return instead."""
    try:
        return results.encode(value, job_type)
    except (ResultTooLarge, ResultNotSerialisable) as exc:
        raise Permanent(str(exc)) from exc


def log_outcome(ctx: JobContext, failure: Failure | None) -> None:
    """One line per job: DEBUG when it succeeded, WARNING with what comes next when not."""
    if failure is None:
        outcomes.debug("job %s (%s) succeeded", ctx.job_id, ctx.type)
        return
    if failure.permanent:
        then = "permanent, not retried"
    elif failure.retry_after_s > 0:
        then = f"retry asked for in {failure.retry_after_s:g}s"
    else:
        then = "the leasekeeper decides the retry"
    outcomes.warning("job %s (%s, attempt %d) failed (%s): %s: %s", ctx.job_id, ctx.type,
                     ctx.attempt, then, failure.error_class, failure.message)  # fmt: skip


class EventLoopThread:
    """One asyncio loop on a daemon thread, shared by all of a worker's async handlers.

    Daemon, so a coroutine that ignores cancellation cannot keep the process
    alive after shutdown's grace period.
    """

    def __init__(self, name: str = "worker-asyncio") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def submit(self, coro: Coroutine[Any, Any, None]) -> concurrent.futures.Future[None]:
        if self._loop is None or self._loop.is_closed():
            coro.close()
            raise RuntimeError("event loop thread is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def stop(self, timeout: float) -> None:
        """Cancel what is still running, give it ``timeout`` to unwind, stop the loop."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_all(timeout), loop).result(timeout + 1)
        except (TimeoutError, concurrent.futures.TimeoutError, RuntimeError):
            log.warning("async handlers did not stop within %.1fs", timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout + 1)

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        loop.call_soon(self._ready.set)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()


async def _cancel_all(timeout: float) -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
