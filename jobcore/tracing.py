"""W3C trace context in the job envelope's ``trace`` map, when OpenTelemetry is installed.

``opentelemetry-api`` is optional (``pip install kafka-lease-queue[tracing]``):
without it, ``current_trace()`` is empty and nothing else changes. With it, the
producer records the active span's ``traceparent`` (and ``tracestate``) in every
job, and the worker runs each handler in a span that is its child
(``workers/tracing.py``), so one trace shows the request that enqueued a job and
the job's run, however long it waited in Kafka.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

__all__ = ["current_trace", "tracing_available"]


@functools.cache
def tracing_available() -> bool:
    """Whether ``opentelemetry`` can be imported; looked up once (every enqueue asks)."""
    return importlib.util.find_spec("opentelemetry") is not None


@functools.cache
def _opentelemetry() -> tuple[Any, Any]:
    """``opentelemetry.context`` and ``.propagate``, imported once (every enqueue asks)."""
    from opentelemetry import context, propagate

    return context, propagate


def current_trace() -> dict[str, str]:
    """The active trace context as W3C headers (``traceparent``); empty without one."""
    if not tracing_available():
        return {}
    context, propagate = _opentelemetry()
    if not context.get_current():  # no span, no baggage: nothing to carry (most enqueues)
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
