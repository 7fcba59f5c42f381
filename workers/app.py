"""The handler registry a worker module exposes: ``app = App(); @app.job("type")``."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from workers.context import JobContext
from workers.middleware import Middleware

log = logging.getLogger(__name__)

HandlerFunc = Callable[[JobContext, dict[str, Any]], object]
SettledHook = Callable[[JobContext, str, bool], None]
F = TypeVar("F", bound=HandlerFunc)


class DuplicateHandler(ValueError):
    """Two handlers for one job type: which one runs would be an accident of import order."""


@dataclass(frozen=True, kw_only=True)
class Handler:
    """A registered handler and its per-type settings.

    ``timeout_s`` overrides the job's own ``timeout_s``. The lease length is the
    leasekeeper's to decide (``leasekeeper serve --lease-for TYPE=S``); it says so in
    every claim.
    """

    job_type: str
    func: HandlerFunc
    is_async: bool
    timeout_s: float | None = None


class App:
    """Maps job types to handlers; one module-level ``App`` per worker module.

    Handlers take ``(ctx: JobContext, payload: dict)``. A plain ``def`` runs on
    the worker's thread pool; an ``async def`` runs on the worker's event loop.
    ``middleware`` hooks in around every job and the worker's start and stop
    (``workers/middleware.py``).
    """

    def __init__(self, name: str = "app", *, middleware: Sequence[Middleware] = ()) -> None:
        self.name = name
        self.middleware = tuple(middleware)
        self._handlers: dict[str, Handler] = {}
        self._settled_hooks: list[SettledHook] = []

    def job(
        self,
        job_type: str,
        *,
        timeout_s: float | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``job_type``."""
        if not job_type:
            raise ValueError("job type must not be empty")
        _check_seconds(job_type, "timeout_s", timeout_s)

        def register(func: F) -> F:
            self.add(
                Handler(
                    job_type=job_type,
                    func=func,
                    is_async=inspect.iscoroutinefunction(func),
                    timeout_s=timeout_s,
                )
            )
            return func

        return register

    def add(self, handler: Handler) -> None:
        """Register a handler built by hand; a second one for the same type is an error."""
        existing = self._handlers.get(handler.job_type)
        if existing is not None:
            raise DuplicateHandler(
                f"job type {handler.job_type!r} already has a handler "
                f"({_qualname(existing.func)}); cannot also register {_qualname(handler.func)}"
            )
        self._handlers[handler.job_type] = handler

    def handler_for(self, job_type: str) -> Handler | None:
        return self._handlers.get(job_type)

    @property
    def handlers(self) -> Mapping[str, Handler]:
        return dict(self._handlers)

    @property
    def has_async_handlers(self) -> bool:
        return any(h.is_async for h in self._handlers.values())

    def on_settled(self, callback: SettledHook) -> SettledHook:
        """Call ``callback(ctx, outcome, accepted)`` after the leasekeeper answered a settle.

        ``outcome`` is "ack", "nack" or "release"; ``accepted`` is False when the
        leasekeeper refused it (stale token). Usable as a decorator. A hook that
        raises is logged and does not affect the job.
        """
        self._settled_hooks.append(callback)
        return callback

    def notify_settled(self, ctx: JobContext, outcome: str, accepted: bool) -> None:
        for hook in self._settled_hooks:
            try:
                hook(ctx, outcome, accepted)
            except Exception:
                log.exception("on_settled hook %s failed", _qualname(hook))


def _check_seconds(job_type: str, name: str, value: float | None) -> None:
    """A per-type duration is finite and positive: NaN compares false with
    everything, so ``<= 0`` alone would let it through to the deadlines."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"@app.job({job_type!r}, {name}=...) must be a finite number of seconds > 0, "
            f"got {value}"
        )


def _qualname(func: object) -> str:
    module = getattr(func, "__module__", "?")
    return f"{module}.{getattr(func, '__qualname__', repr(func))}"
