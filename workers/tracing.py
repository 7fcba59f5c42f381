"""A span per job, the child of the span that enqueued it (see ``jobcore/tracing.py``).

The worker adds this middleware first whenever ``opentelemetry-api`` is
installed; without it there is no middleware and no cost. The span is current
while the handler runs (on its thread or in its task), so spans the handler
starts nest under it. Attributes: job id, type, tenant, queue, attempt, and the
outcome with the handler's run time. A job without a trace, in a process with no
tracer provider set, gets no span: it would record nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from jobcore.tracing import tracing_available
from workers.context import JobContext
from workers.middleware import JobResult, Middleware, Outcome

__all__ = ["TracingMiddleware", "default_middleware"]

# While no tracer provider is set, how often the middleware looks again.
PROVIDER_RECHECK_S = 1.0


class TracingMiddleware(Middleware):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        from opentelemetry import context, propagate, trace

        self._trace: Any = trace
        self._context: Any = context
        self._propagate: Any = propagate
        self._tracer = trace.get_tracer("kafka-lease-queue.workers")
        self._open: dict[str, tuple[Any, object]] = {}
        self._clock = clock
        self._provider_set = False
        self._unset_until = float("-inf")

    def _recording(self) -> bool:
        """Whether an SDK's tracer provider is set. While none is, it is looked up at
        most once per ``PROVIDER_RECHECK_S`` (the API's look-up reads the process
        environment every time: most of the middleware's cost on a no-op job); once
        one is, for good (the API never replaces a provider that was set)."""
        if self._provider_set:
            return True
        now = self._clock()
        if now < self._unset_until:
            return False
        if isinstance(self._trace.get_tracer_provider(), _UNSET_PROVIDERS):
            self._unset_until = now + PROVIDER_RECHECK_S
            return False
        self._provider_set = True
        return True

    def before_job(self, ctx: JobContext) -> None:
        if not ctx.trace and not self._recording():
            # No trace to continue and no SDK to record a span: the span would be a
            # non-recording one that nothing can see (and a fifteenth of a no-op job's
            # cost). A provider set later is seen within PROVIDER_RECHECK_S.
            return
        trace, context, propagate = self._trace, self._context, self._propagate
        parent = propagate.extract(dict(ctx.trace))
        span = self._tracer.start_span(
            f"job {ctx.type}",
            context=parent,
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "job.id": ctx.job_id,
                "job.type": ctx.type,
                "job.tenant": ctx.tenant_id,
                "job.queue": ctx.queue,
                "job.attempt": ctx.attempt,
            },
        )
        token = context.attach(trace.set_span_in_context(span, parent))
        self._open[ctx.lease_id] = (span, token)

    def after_job(self, ctx: JobContext, result: JobResult) -> None:
        opened = self._open.pop(ctx.lease_id, None)
        if opened is None:
            return
        trace, context = self._trace, self._context
        span, token = opened
        span.set_attribute("job.outcome", result.outcome.value)
        span.set_attribute("job.duration_s", result.duration_s)
        if result.outcome is Outcome.FAILED and result.error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, result.error.error_class))
        span.end()
        context.detach(token)


# The providers in place until an SDK's is set (the API's defaults).
_UNSET_PROVIDERS: tuple[type, ...] = ()
if tracing_available():
    from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

    _UNSET_PROVIDERS = (ProxyTracerProvider, NoOpTracerProvider)


def default_middleware() -> tuple[Middleware, ...]:
    """Tracing when OpenTelemetry is installed, else nothing."""
    return (TracingMiddleware(),) if tracing_available() else ()
