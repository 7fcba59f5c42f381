"""From a claimed envelope to what a handler is called with, or to why it cannot be.

Decoding sits behind the small ``EnvelopeDecoder`` protocol, so the runtime
does not care which codec produced the bytes and unit tests can inject a fake.
``default_decoder`` builds the real one, ``schemas.codec.EnvelopeCodec``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.confluent import SchemaUnavailable
from schemas.job import Job
from workers.app import App, Handler
from workers.context import JobContext, _Signals
from workers.errors import PAYLOAD_DECODE_ERROR, UNKNOWN_JOB_TYPE, Failure, format_traceback
from workers.messages import ClaimedJob


class EnvelopeDecoder(Protocol):
    """Decodes the envelope, then the payload by its job type's schema."""

    def decode(self, data: bytes, /) -> Job: ...
    def decode_payload(self, job_type: str, data: bytes, /) -> dict[str, Any]: ...


def default_decoder(schema_dirs: Sequence[str | Path] = ()) -> EnvelopeDecoder:
    """The project's Avro codec, reading extra payload schemas from ``schema_dirs``.

    Raises ``schemas.codec.SchemaError`` when a directory is missing or a
    schema does not load: a worker that cannot read its payloads should not start.
    """
    return EnvelopeCodec(SchemaRegistry(extra_dirs=schema_dirs))


@dataclass(frozen=True, kw_only=True)
class JobTypes:
    """The job types a worker asks for, and the handled ones it cannot decode.

    A worker that has a handler but not the payload schema would take such jobs
    only to fail them; it leaves the type out of its claims instead, so they
    wait for a worker that can run them.
    """

    runnable: tuple[str, ...]
    missing_schema: tuple[str, ...]


def job_types(app: App, decoder: EnvelopeDecoder) -> JobTypes:
    """Split ``app``'s handled types by whether ``decoder`` has their payload schema
    (a decoder that cannot tell, such as a test fake, is taken to have them all)."""
    handled = sorted(app.handlers)
    if not isinstance(decoder, EnvelopeCodec):
        return JobTypes(runnable=tuple(handled), missing_schema=())
    known = set(decoder.registry.payload_types())
    return JobTypes(
        runnable=tuple(t for t in handled if t in known),
        missing_schema=tuple(t for t in handled if t not in known),
    )


class Runnable:
    """A claimed job ready to run: its handler, context, payload and time limit. A
    slotted class, not a dataclass: one is made for every job (compiled, a
    dataclass keeps its generated ``__init__``, run as Python)."""

    __slots__ = ("ctx", "handler", "payload", "timeout_s")

    def __init__(
        self, *, handler: Handler, ctx: JobContext, payload: dict[str, Any], timeout_s: float | None
    ) -> None:
        self.handler = handler
        self.ctx = ctx
        self.payload = payload
        self.timeout_s = timeout_s


@dataclass(frozen=True, kw_only=True)
class Unrunnable:
    """A claimed job that cannot run here. Undecodable bytes are nacked permanently at
    once; a type with no handler in this app is released (``release``), since another
    worker (or this one after a deploy) may have the handler: the leasekeeper
    dead-letters it only after its unknown-type grace if none comes."""

    ctx: JobContext
    failure: Failure
    release: bool = False


def prepare(app: App, decoder: EnvelopeDecoder, lease: ClaimedJob) -> Runnable | Unrunnable:
    """Decode ``lease``'s envelope and payload and find its handler.

    A decoding failure is permanent: another attempt would decode the same bytes
    with the same schemas. A missing handler is not: it is released. Nor is a
    writer's schema that is not cached while the registry is down: it is retried.
    A claim that carried the job's fields needs no envelope decode: only the payload.
    """
    if lease.has_fields:
        return _prepared(app, decoder, _claim_context(lease), lease.payload, lease.timeout_s)
    try:
        envelope = decoder.decode(lease.envelope)
    except SchemaUnavailable as exc:
        return Unrunnable(ctx=_bare_context(lease), failure=_unavailable(exc))
    except Exception as error:  # its own name: compiled, a name has one type
        return Unrunnable(ctx=_bare_context(lease), failure=_decode_failure("envelope", error))
    return _prepared(app, decoder, _context(lease, envelope), envelope.payload, envelope.timeout_s)


def _prepared(
    app: App, decoder: EnvelopeDecoder, ctx: JobContext, data: bytes, timeout_s: float
) -> Runnable | Unrunnable:
    """Find the handler of ``ctx.type`` and decode the payload ``data`` for it."""
    handler = app.handler_for(ctx.type)
    if handler is None:
        message = f"no handler for job type {ctx.type!r} in app {app.name!r}"
        return Unrunnable(
            ctx=ctx,
            failure=Failure(error_class=UNKNOWN_JOB_TYPE, message=message, permanent=True),
            release=True,
        )
    try:
        payload = decoder.decode_payload(ctx.type, data)
    except SchemaUnavailable as exc:
        return Unrunnable(ctx=ctx, failure=_unavailable(exc))
    except Exception as error:  # its own name: compiled, a name has one type
        return Unrunnable(ctx=ctx, failure=_decode_failure(f"{ctx.type} payload", error))
    timeout = handler.timeout_s or (timeout_s if timeout_s > 0 else None)
    return Runnable(handler=handler, ctx=ctx, payload=payload, timeout_s=timeout)


def _unavailable(exc: SchemaUnavailable) -> Failure:
    """Transient: the job is retried with backoff, not dead-lettered."""
    return Failure(error_class=type(exc).__name__, message=str(exc), retry_after_s=5.0)


def _decode_failure(what: str, exc: Exception) -> Failure:
    return Failure(
        error_class=PAYLOAD_DECODE_ERROR,
        message=f"cannot decode {what}: {type(exc).__qualname__}: {exc}",
        traceback=format_traceback(exc),
        permanent=True,
    )


def _context(lease: ClaimedJob, envelope: Job) -> JobContext:
    return _new_context(
        job_id=envelope.job_id,
        attempt=lease.attempt,
        tenant_id=envelope.tenant_id,
        queue=envelope.queue,
        type=envelope.type,
        created_at_ms=envelope.created_at_ms,
        lease_id=lease.ref.lease_id,
        max_attempts=envelope.max_attempts,
        trace=dict(envelope.trace),
    )


def _claim_context(lease: ClaimedJob) -> JobContext:
    """The context from the fields the claim carried (no envelope decoded)."""
    return _new_context(
        job_id=lease.job_id,
        attempt=lease.attempt,
        tenant_id=lease.tenant_id,
        queue=lease.queue,
        type=lease.type,
        created_at_ms=lease.created_at_ms,
        lease_id=lease.ref.lease_id,
        max_attempts=lease.max_attempts,
        trace=lease.trace,
    )


def _bare_context(lease: ClaimedJob) -> JobContext:
    """A context for an envelope that could not be read: only the lease is known."""
    return _new_context(
        job_id="",
        attempt=lease.attempt,
        tenant_id="",
        queue="",
        type="",
        created_at_ms=0,
        lease_id=lease.ref.lease_id,
    )


def _new_context(
    *,
    job_id: str,
    attempt: int,
    tenant_id: str,
    queue: str,
    type: str,
    created_at_ms: int,
    lease_id: str,
    max_attempts: int = 0,
    trace: Mapping[str, str] | None = None,
) -> JobContext:
    """The ``JobContext`` that ``JobContext(...)`` makes, made without the frozen
    dataclass's ``__init__`` (a checked ``object.__setattr__`` a field, a tenth of a
    no-op job's worker time): the fields are set in one step, and the instance is
    as frozen, equal and printable as any other (``test_worker_hot_path`` holds
    the two ways of making one to the same fields)."""
    ctx: JobContext = object.__new__(JobContext)
    object.__setattr__(ctx, "__dict__", {
        "job_id": job_id, "attempt": attempt, "tenant_id": tenant_id, "queue": queue,
        "type": type, "created_at_ms": created_at_ms, "lease_id": lease_id,
        "max_attempts": max_attempts, "trace": {} if trace is None else trace,
        "_signals": _Signals(),
    })  # fmt: skip
    return ctx
