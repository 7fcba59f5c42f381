"""Worker middleware: hooks around every job and around the worker's life.

The way Dramatiq and arq users hook in: ``App(middleware=[Timing(), ...])``.
Each middleware overrides what it needs of ``on_worker_start``,
``on_worker_stop``, ``before_job`` and ``after_job`` (outcome, the handler's
run time, the error). ``before_job`` and ``after_job`` run on the thread (sync
handlers) or in the task (async handlers) that runs the handler, so a context
variable set in ``before_job`` is seen by the handler; reset it in
``after_job``. A hook that raises is logged and never changes the job's outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from workers.context import JobContext
from workers.errors import Failure

if TYPE_CHECKING:
    from workers.app import App

__all__ = ["JobResult", "Middleware", "MiddlewareChain", "Outcome"]

log = logging.getLogger(__name__)

_new = object.__new__
_set = object.__setattr__


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class JobResult:
    """How one handler call went: ``duration_s`` is the handler's own run time."""

    outcome: Outcome
    duration_s: float
    error: Failure | None = None


class Middleware:
    """Base class: every hook does nothing unless overridden."""

    def on_worker_start(self, app: App) -> None:
        """The worker is about to claim its first job."""

    def on_worker_stop(self, app: App) -> None:
        """The worker stopped claiming and drained."""

    def before_job(self, ctx: JobContext) -> None:
        """Just before the handler runs, on its thread or in its task."""

    def after_job(self, ctx: JobContext, result: JobResult) -> None:
        """Just after the handler returned or raised, before the job is settled."""


class MiddlewareChain:
    """Calls the hooks in order (``after_job`` in reverse, like nested contexts)."""

    def __init__(
        self, middleware: Sequence[Middleware], clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._middleware = tuple(middleware)
        self._clock = clock

    def worker_start(self, app: App) -> None:
        for m in self._middleware:
            self._safely(m.on_worker_start, app)

    def worker_stop(self, app: App) -> None:
        for m in reversed(self._middleware):
            self._safely(m.on_worker_stop, app)

    def run_sync(self, ctx: JobContext, call: Callable[[], Failure | None]) -> Failure | None:
        if not self._middleware:
            return call()
        self._before(ctx)
        started = self._clock()
        failure = call()
        self._after(ctx, failure, self._clock() - started)
        return failure

    async def run_async(
        self, ctx: JobContext, call: Callable[[], Awaitable[Failure | None]]
    ) -> Failure | None:
        if not self._middleware:
            return await call()
        self._before(ctx)
        started = self._clock()
        failure = await call()
        self._after(ctx, failure, self._clock() - started)
        return failure

    # Per job: the hooks are called in place (not through ``_safely``), one call less
    # for each.
    def _before(self, ctx: JobContext) -> None:
        for m in self._middleware:
            try:
                m.before_job(ctx)
            except Exception:
                _failed(m.before_job)

    def _after(self, ctx: JobContext, failure: Failure | None, duration_s: float) -> None:
        # Made as ``JobResult(...)`` would make it, without the frozen dataclass's
        # checked ``__init__`` (once for every job).
        result: JobResult = _new(JobResult)
        _set(result, "__dict__", {
            "outcome": Outcome.SUCCEEDED if failure is None else Outcome.FAILED,
            "duration_s": duration_s,
            "error": failure,
        })  # fmt: skip
        for m in reversed(self._middleware):
            try:
                m.after_job(ctx, result)
            except Exception:
                _failed(m.after_job)

    @staticmethod
    def _safely(hook: Callable[..., None], *args: object) -> None:
        try:
            hook(*args)
        except Exception:
            _failed(hook)


def _failed(hook: Callable[..., None]) -> None:
    """Log the hook's exception (called from its ``except``): a failing hook must not
    fail the job or stop the other hooks."""
    log.exception("middleware hook %s failed", getattr(hook, "__qualname__", hook))
