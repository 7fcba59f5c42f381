"""Eager mode: every job runs inline when it is enqueued, as Celery's
``task_always_eager`` and Sidekiq's ``Sidekiq::Testing.inline!`` run theirs.

``eager(app)`` gives a real ``JobProducer`` whose transport (``producer.transport``)
runs each job through the worker's execution path (``jobtesting.inline``) instead
of writing it to Kafka: the request is validated exactly as in production (schemas,
options, ordering keys, priority classes: the same errors, nothing runs), then the
handler of its type runs with its decoded payload inside the app's middleware, and
``enqueue`` returns once the job has ended. No Kafka, no leasekeeper, no thread of
a worker: for code under test that enqueues deep inside.

What each outcome does in eager mode (the leasekeeper's part, decided here):

- success: the run is recorded ``succeeded``; ``enqueue`` returns the job id;
- an exception, ``Retry`` or ``Retry(after=...)``: the attempt counts, and the next
  runs at once, with no backoff and no wait for ``after`` (recorded on the attempt
  as ``retry_after_s``), up to the job's ``max_attempts``;
- ``Permanent`` (or a payload the handler's schema cannot decode, or a type with
  no handler in ``app``): no further attempt;
- a handler past its ``timeout_s`` (the handler's, else the job's): its lease is
  marked lost (``ctx.lease_lost``, "timed out after Ns"), an ``async def`` handler
  is cancelled; a sync one cannot be stopped, so the enqueue waits for it and
  drops what it returned. The attempt fails with ``JobTimeout`` and is retried
  like any failure;
- a job that never succeeds is dead, with the leasekeeper's dead-letter reason
  ("attempts exhausted", "permanent error", "unknown job type", "undecodable"):
  ``enqueue`` raises :class:`EagerJobDead` (the run, with every attempt, is on the
  exception and in the record), so a test cannot miss it.
  ``eager(app, raise_dead=False)`` records it and returns the id instead, as the
  real producer does for a job that later dies;
- a delayed job (``delay=`` or ``run_at=``) runs at once; its run keeps when it
  was due (``due_ms``). A ``dedupe_key`` does not skip a second job: each enqueue
  runs.

``producer.status(queue, job_id)`` answers from the record (source "eager mode").
``Eager.outbox(on_commit)`` stands in for ``producer.outbox.Outbox``: a staged job
runs when the transaction commits, and never when it rolls back.
``cancel``, ``record_cancellation`` and ``send_job`` need Kafka and say so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from jobcore.closing import Closing
from jobcore.config import schema_path_from_env
from jobcore.job_state import JobState
from jobcore.priority import PriorityClasses
from jobtesting.inline import Attempt, PrivateLoop, lease_for, run_attempt
from jobtesting.outbox import EagerOutbox
from producer.api import JobProducer
from producer.lookup import JobLookup
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.vocabulary import DeadLetterReason
from workers.app import App
from workers.decoding import Unrunnable
from workers.errors import PAYLOAD_DECODE_ERROR, UNKNOWN_JOB_TYPE
from workers.messages import ClaimedJob
from workers.middleware import MiddlewareChain
from workers.tracing import default_middleware

__all__ = ["Eager", "EagerJobDead", "EagerRun", "EagerTransport", "eager"]

SOURCE = "eager mode"


@dataclass(frozen=True, kw_only=True)
class EagerRun:
    """One enqueued job and how it ran: every attempt, and how it ended (``state``
    succeeded or dead, with the dead-letter ``reason``). ``payload`` is what the
    handler was given (decoded by its schema, defaults filled in); ``due_ms`` when a
    delayed job would have been due (None: due at once)."""

    job: Job
    payload: dict[str, Any]
    attempts: tuple[Attempt, ...]
    state: JobState
    reason: str | None = None
    ended_at_ms: int = 0
    due_ms: int | None = None

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def type(self) -> str:
        return self.job.type

    @property
    def tenant_id(self) -> str:
        return self.job.tenant_id

    @property
    def queue(self) -> str:
        return self.job.queue

    @property
    def succeeded(self) -> bool:
        return self.state is JobState.SUCCEEDED

    @property
    def last_error(self) -> str | None:
        error = self.attempts[-1].error if self.attempts else None
        return None if error is None else f"{error.error_class}: {error.message}"


class EagerJobDead(Exception):
    """An eagerly run job ended dead; ``run`` says how each attempt went."""

    def __init__(self, run: EagerRun) -> None:
        attempts = len(run.attempts)
        super().__init__(
            f"job {run.job_id} ({run.type}, tenant {run.tenant_id}) is dead after "
            f"{attempts} attempt{'s' if attempts != 1 else ''} ({run.reason}): "
            f"{run.last_error}; eager(app, raise_dead=False) records it instead of raising"
        )
        self.run = run
        last = run.attempts[-1].error if run.attempts else None
        if last is not None and last.traceback:
            self.add_note(f"the handler's last traceback:\n{last.traceback}")


class EagerTransport:
    """A ``JobProducer`` transport that runs each job inline (see the module's doc)."""

    def __init__(
        self,
        app: App,
        codec: EnvelopeCodec,
        *,
        raise_dead: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._app = app
        self._codec = codec
        self._raise_dead = raise_dead
        self._clock = clock
        self._chain = MiddlewareChain((*default_middleware(), *app.middleware))
        self._loop = PrivateLoop()
        self._lock = threading.Lock()
        self._runs: dict[str, EagerRun] = {}
        self._chain.worker_start(app)

    @property
    def runs(self) -> list[EagerRun]:
        with self._lock:
            return list(self._runs.values())

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()

    def destination(self, job: Job) -> str:
        return f"{SOURCE}:{job.queue}"

    def send(self, job: Job, topic: str) -> Future[str]:
        run = self._run(job)
        with self._lock:
            self._runs[job.job_id] = run
        if run.state is JobState.DEAD and self._raise_dead:
            raise EagerJobDead(run)
        future: Future[str] = Future()
        future.set_result(job.job_id)
        return future

    def status(
        self,
        queue: str,
        job_id: str,
        *,
        dashboard: str | None,
        token: str | None,
        enqueued_at_ms: int | None,
    ) -> JobLookup:
        with self._lock:
            run = self._runs.get(job_id)
        if run is None or run.queue != queue:
            return JobLookup(
                job_id=job_id,
                state=JobState.NOT_FOUND,
                source=SOURCE,
                note=f"no job {job_id} of queue {queue!r} was enqueued in eager mode",
            )
        return JobLookup(
            job_id=job_id,
            state=run.state,
            source=SOURCE,
            queue=queue,
            attempt=len(run.attempts),
            reason=run.reason,
            last_error=run.last_error,
            at_ms=run.ended_at_ms,
            duration_s=sum(a.duration_s for a in run.attempts),
        )

    def flush(self, timeout: float) -> None:
        """Nothing is buffered: every job ended before its enqueue returned."""

    def close(self, timeout: float) -> None:
        self._loop.close()
        self._chain.worker_stop(self._app)

    def _run(self, job: Job) -> EagerRun:
        """Attempts until one succeeds, one fails for good, or ``max_attempts`` ran."""
        attempts: list[Attempt] = []
        payload: dict[str, Any] | None = None
        reason: str | None = DeadLetterReason.ATTEMPTS_EXHAUSTED.value
        for number in range(1, job.max_attempts + 1):
            prepared, attempt = run_attempt(
                app=self._app,
                decoder=self._codec,
                chain=self._chain,
                loop=self._loop,
                lease=_lease(job, number),
            )
            attempts.append(attempt)
            if isinstance(prepared, Unrunnable):
                reason = _unrunnable_reason(prepared)
                break
            payload = prepared.payload
            if attempt.error is None:
                reason = None
                self._app.notify_settled(prepared.ctx, "ack", True)
                break
            self._app.notify_settled(prepared.ctx, "nack", True)
            if attempt.error.permanent:
                reason = DeadLetterReason.PERMANENT_ERROR.value
                break
        return EagerRun(
            job=job,
            payload=payload if payload is not None else self._decoded(job),
            attempts=tuple(attempts),
            state=JobState.SUCCEEDED if reason is None else JobState.DEAD,
            reason=reason,
            ended_at_ms=int(self._clock() * 1000),
            due_ms=job.run_at_ms if job.run_at_ms > job.created_at_ms else None,
        )

    def _decoded(self, job: Job) -> dict[str, Any]:
        try:
            return self._codec.decode_payload(job.type, job.payload)
        except Exception:  # a run that never reached a handler keeps what can be read
            return {}


def _lease(job: Job, attempt: int) -> ClaimedJob:
    return lease_for(
        job_id=job.job_id,
        attempt=attempt,
        type=job.type,
        tenant_id=job.tenant_id,
        queue=job.queue,
        payload=job.payload,
        max_attempts=job.max_attempts,
        timeout_s=job.timeout_s,
        created_at_ms=job.created_at_ms,
        trace=dict(job.trace),
    )


def _unrunnable_reason(prepared: Unrunnable) -> str:
    if prepared.failure.error_class == UNKNOWN_JOB_TYPE:
        return DeadLetterReason.UNKNOWN_JOB_TYPE.value
    if prepared.failure.error_class == PAYLOAD_DECODE_ERROR:
        return DeadLetterReason.UNDECODABLE.value
    return DeadLetterReason.PERMANENT_ERROR.value


@dataclass(kw_only=True)
class Eager(Closing):
    """Eager mode for one app: ``producer`` is the ``JobProducer`` to give the code
    under test; ``runs`` what ran. A context manager: leaving it closes the producer
    (the worker-stop hooks of the app's middleware run then)."""

    producer: JobProducer
    transport: EagerTransport = field(repr=False)
    registry: SchemaRegistry = field(repr=False)
    classes: PriorityClasses | None = field(default=None, repr=False)

    @property
    def runs(self) -> list[EagerRun]:
        """Every job run so far, in the order they ended (a job that a handler enqueued
        ends before the job whose handler enqueued it)."""
        return self.transport.runs

    def run_of(self, job_id: str) -> EagerRun:
        """The run of ``job_id``; KeyError names the ids that did run."""
        for run in self.transport.runs:
            if run.job_id == job_id:
                return run
        raise KeyError(f"no job {job_id} ran in eager mode (ran: {self._ids()})")

    def ran(
        self,
        *,
        type: str | None = None,
        tenant: str | None = None,
        queue: str | None = None,
        payload: Mapping[str, object] | None = None,
    ) -> list[EagerRun]:
        """The runs that match every criterion given; ``payload`` matches the keys it
        names (as the handler received them)."""
        return [
            run
            for run in self.transport.runs
            if (type is None or run.type == type)
            and (tenant is None or run.tenant_id == tenant)
            and (queue is None or run.queue == queue)
            and (payload is None or all(run.payload.get(k) == v for k, v in payload.items()))
        ]

    def clear(self) -> None:
        """Forget the runs recorded so far."""
        self.transport.clear()

    def outbox(self, on_commit: Callable[[Callable[[], None]], None]) -> EagerOutbox:
        """An outbox whose staged jobs run once the caller's transaction commits;
        ``on_commit`` is the framework's hook (Django: ``transaction.on_commit``)."""
        return EagerOutbox(self.transport, self.registry, self.classes, on_commit)

    def close(self) -> None:
        self.producer.close()

    def _ids(self) -> str:
        return ", ".join(run.job_id for run in self.transport.runs) or "none"


def eager(
    app: App,
    *,
    registry: SchemaRegistry | None = None,
    raise_dead: bool = True,
    classes: PriorityClasses | None = None,
    clock: Callable[[], float] = time.time,
) -> Eager:
    """Eager mode for ``app``: a ``JobProducer`` whose jobs run inline at enqueue.

    ``registry`` holds the payload schemas (default: the package's and
    ``JOBS_SCHEMA_PATH``'s, as ``JobProducer()`` loads them); the producer validates
    with them and the handler's payload is decoded with them. ``classes`` are the
    priority classes the producer accepts (default: ``JOBS_PRIORITY_CLASSES``'s).
    """
    if registry is None:
        registry = SchemaRegistry(extra_dirs=schema_path_from_env())
    transport = EagerTransport(app, EnvelopeCodec(registry), raise_dead=raise_dead, clock=clock)
    producer = JobProducer(
        None, registry=registry, classes=classes, clock=clock, transport=transport
    )
    return Eager(producer=producer, transport=transport, registry=registry, classes=classes)
