"""A trace crosses from the producer to the handler; without OpenTelemetry nothing changes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import ProxyTracerProvider

import jobcore.tracing
from producer.request import JobRequest, build_job
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.unit.test_worker_support import FakeLeaseKeeper, running_worker, serving, wait_until
from workers import App, JobContext
from workers.tracing import PROVIDER_RECHECK_S, TracingMiddleware

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)
    yield _EXPORTER


def _job(codec: EnvelopeCodec) -> bytes:
    request = JobRequest(queue="test", type="noop", payload={"n": 1}, tenant_id="acme")
    return codec.encode(build_job(request, codec=codec, now=time.time(), job_id="job-traced"))


def test_a_trace_crosses_from_the_producer_to_the_handler(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    codec = EnvelopeCodec(SchemaRegistry())
    with trace.get_tracer("web").start_as_current_span("POST /orders") as request_span:
        envelope = _job(codec)
    parent = request_span.get_span_context()
    assert codec.decode(envelope).trace["traceparent"].split("-")[1] == f"{parent.trace_id:032x}"

    app = App("traced")
    inside: list[int] = []

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        inside.append(trace.get_current_span().get_span_context().trace_id)

    fake = FakeLeaseKeeper([envelope])
    with serving(fake, tmp_path / "lk.sock") as target, running_worker(app, target):
        wait_until(lambda: len(fake.outcomes("ack")) == 1, what="the ack")

    assert inside == [parent.trace_id]
    (job_span,) = [s for s in spans.get_finished_spans() if s.name == "job noop"]
    assert job_span.parent is not None and job_span.parent.span_id == parent.span_id
    attributes = dict(job_span.attributes or {})
    assert attributes["job.id"] == "job-traced" and attributes["job.tenant"] == "acme"
    assert attributes["job.attempt"] == 1 and attributes["job.outcome"] == "succeeded"


def test_without_opentelemetry_the_envelope_has_no_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobcore.tracing, "tracing_available", lambda: False)
    codec = EnvelopeCodec(SchemaRegistry())
    with trace.get_tracer("web").start_as_current_span("POST /orders"):
        assert codec.decode(_job(codec)).trace == {}


def test_no_span_is_made_when_there_is_neither_a_trace_nor_a_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker's per-job span costs nothing when it could record nothing; a job that
    carries a trace still runs in a span that continues it."""
    from workers.tracing import TracingMiddleware

    monkeypatch.setattr(trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    middleware = TracingMiddleware()
    bare = JobContext(job_id="j1", attempt=1, tenant_id="t", queue="q", type="noop",
                      created_at_ms=1, lease_id="l1")  # fmt: skip
    middleware.before_job(bare)
    assert middleware._open == {}
    traced = JobContext(job_id="j2", attempt=1, tenant_id="t", queue="q", type="noop",
                        created_at_ms=1, lease_id="l2",
                        trace={"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"})  # fmt: skip
    middleware.before_job(traced)
    assert list(middleware._open) == ["l2"]
    span, token = middleware._open.pop("l2")
    assert f"{span.get_span_context().trace_id:032x}" == "1" * 32
    span.end()
    otel_context.detach(token)


class _Api:
    """The API's provider look-up, counted: the API's default until ``provider`` is set."""

    def __init__(self) -> None:
        self.looked = 0
        self.provider: object = ProxyTracerProvider()

    def get_tracer_provider(self) -> object:
        self.looked += 1
        return self.provider


def test_an_unset_provider_is_looked_up_once_a_second_and_a_set_one_never_again() -> None:
    now = [0.0]
    middleware = TracingMiddleware(clock=lambda: now[0])
    api = _Api()
    middleware._trace = api
    assert not middleware._recording() and not middleware._recording()
    assert api.looked == 1
    now[0] += PROVIDER_RECHECK_S
    assert not middleware._recording() and api.looked == 2
    api.provider = TracerProvider()
    assert not middleware._recording()  # seen at the next look-up, within the second
    now[0] += PROVIDER_RECHECK_S
    assert middleware._recording() and middleware._recording() and api.looked == 3
