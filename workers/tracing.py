"""A span per job, the child of the span that enqueued it (see ``jobcore/tracing.py``).

The worker adds this middleware first whenever ``opentelemetry-api`` is
installed; without it there is no middleware and no cost. The span is current
while the handler runs (on its thread or in its task), so spans the handler
starts nest under it. Attributes: job id, type, tenant, queue, attempt, and the
outcome with the handler's run time. A job without a trace, in a process with no
tracer provider set, gets no span: it would record nothing.
"""

from __future__ import annotations

from typing import Any

from jobcore.tracing import tracing_available
from workers.context import JobContext
from workers.middleware import JobResult, Middleware, Outcome

__all__ = ["TracingMiddleware", "default_middleware"]


class TracingMiddleware(Middleware):
    def __init__(self) -> None:
        from opentelemetry import trace

        self._tracer = trace.get_tracer("kafka-lease-queue.workers")
        self._open: dict[str, tuple[Any, object]] = {}

    def before_job(self, ctx: JobContext) -> None:
        from opentelemetry import trace

        if not ctx.trace and isinstance(trace.get_tracer_provider(), _UNSET_PROVIDERS):
            # No trace to continue and no SDK to record a span: the span would be a
            # non-recording one that nothing can see (and a fifteenth of a no-op job's
            # cost). A provider set later is seen at the next job.
            return
        from opentelemetry import context, propagate

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
        from opentelemetry import context, trace

        opened = self._open.pop(ctx.lease_id, None)
        if opened is None:
            return
        span, token = opened
        span.set_attribute("job.outcome", result.outcome.value)
        span.set_attribute("job.duration_s", result.duration_s)
        if result.outcome is Outcome.FAILED and result.error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, result.error.error_class))
        span.end()
        context.detach(token)  # type: ignore[arg-type]


# The providers in place until an SDK's is set (the API's defaults).
_UNSET_PROVIDERS: tuple[type, ...] = ()
if tracing_available():
    from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

    _UNSET_PROVIDERS = (ProxyTracerProvider, NoOpTracerProvider)


def default_middleware() -> tuple[Middleware, ...]:
    """Tracing when OpenTelemetry is installed, else nothing."""
    return (TracingMiddleware(),) if tracing_available() else ()
