"""The enqueue API: ``JobProducer`` appends Avro-encoded jobs to a queue's topics.

A returned :meth:`JobProducer.enqueue` means the broker acknowledged the job with
``acks=all`` on an idempotent producer: the job is durable and will be run at
least once. Payloads are validated against their job type's schema first, so an
invalid job is never written. A job due now goes to ``jobs.Q``; a delayed one to
the delay tier that fits its wait, from where the leasekeeper releases it when it
is due. :meth:`JobProducer.cancel` records on ``jobs.Q.control`` that a job must
not run.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_all
from types import TracebackType
from typing import Any, Unpack, overload

from jobcore.config import schema_path_from_env
from jobcore.control import Cancellation
from jobcore.delay_tiers import DelayTiers
from jobcore.job_ids import new_job_id
from jobcore.kafka import KafkaSettings
from jobcore.priority import PriorityClasses
from jobcore.topics import DEFAULT_PREFIX, ENV_GROUP, QueueTopics, queue_group
from producer.errors import CancelError, EnqueueError, MissingTopic
from producer.flood import FloodPolicy
from producer.lookup import JobLookup
from producer.ordering_keys import KeyClasses
from producer.request import EnqueueOptions, JobRequest, as_request, build_job
from producer.results import RecentIds, wait_for_result
from producer.status import CancelAnswer
from producer.transport import Delivered, KafkaTransport, Transport, installed_transport
from schemas.codec import EnvelopeCodec, PayloadError, SchemaRegistry
from schemas.job import Job

__all__ = [
    "CancelError",
    "Delivered",
    "EnqueueError",
    "JobProducer",
    "JobRequest",
    "MissingTopic",
    "Transport",
]

log = logging.getLogger(__name__)


class JobProducer:
    """Enqueue jobs onto ``<prefix>.<queue>`` topics, keyed by tenant.

    Validates each request and builds its envelope, then hands the job to its
    transport (``producer.transport``): by default Kafka, one idempotent ``acks=all``
    producer whose delivery reports a background thread serves, so the futures of
    :meth:`enqueue_nowait` resolve without the caller polling. ``transport`` replaces
    it (the testing package's eager mode runs jobs inline), with the same validation;
    ``settings`` may then be None. Safe to share between threads; close it (or use
    ``with``) to deliver what is still buffered.

    ``tiers`` pick the topic a delayed job waits in; they must be the
    leasekeeper's ``--retry-tiers`` (default: both use ``DelayTiers()``), since a
    leasekeeper reads only the tier topics of its own tiers. ``clock`` (epoch
    seconds) stamps ``created_at`` and turns a ``delay`` into a due time.

    ``flood`` (default: ``FloodPolicy.from_env()``, ``JOBS_FLOOD_BURST`` and
    ``JOBS_FLOOD_RATE``) says when one tenant's due-now jobs from this producer are a
    flood, written to the queue's overflow lane instead of its ready partition, so
    that the other tenants of that partition are not read behind it
    (``producer.flood``; ``FloodPolicy.off()`` never diverts).
    """

    def __init__(
        self,
        settings: KafkaSettings | None,
        *,
        registry: SchemaRegistry | None = None,
        prefix: str = DEFAULT_PREFIX,
        tiers: DelayTiers | None = None,
        classes: PriorityClasses | None = None,
        clock: Callable[[], float] = time.time,
        flood: FloodPolicy | None = None,
        transport: Transport | None = None,
    ) -> None:
        # Without a registry, the schemas a CLI would load: the package's own and
        # JOBS_SCHEMA_PATH's, so a caller following the README finds its types.
        if registry is None:
            registry = SchemaRegistry(extra_dirs=schema_path_from_env())
        self._codec = EnvelopeCodec(registry)
        self._prefix = prefix
        queue_group("any", prefix, os.environ.get(ENV_GROUP))  # a bad JOBS_GROUP fails here
        self._classes = classes if classes is not None else PriorityClasses.from_env()
        self._key_classes = KeyClasses()
        self._enqueued = RecentIds()
        self._clock = clock
        self._closed = False
        self._kafka: KafkaTransport | None = None
        # A transport installed for the whole process (tests) is lent, not owned.
        self._owns_transport = transport is not None or installed_transport() is None
        if transport is None:
            transport = installed_transport()
        if transport is None:
            if settings is None:
                raise TypeError("JobProducer needs Kafka settings, or a transport")
            transport = self._kafka = KafkaTransport(
                settings,
                codec=self._codec,
                prefix=prefix,
                tiers=tiers if tiers is not None else DelayTiers(),
                flood=flood if flood is not None else FloodPolicy.from_env(),
            )
        self._transport = transport

    @overload
    def enqueue(self, request: JobRequest, /) -> str: ...

    @overload
    def enqueue(
        self,
        queue: str,
        type: str,
        payload: Mapping[str, object],
        **options: Unpack[EnqueueOptions],
    ) -> str: ...

    def enqueue(
        self,
        queue: str | JobRequest,
        type: str | None = None,
        payload: Mapping[str, object] | None = None,
        **options: Any,
    ) -> str:
        """Enqueue one job and return its id once the broker acknowledged it.

        Give a :class:`JobRequest`, or its fields: ``queue``, ``type``, ``payload``
        and the keyword options. ``run_at`` (an aware datetime) or ``delay`` (seconds
        or a timedelta, up to ``MAX_DELAY``, 30 days) hold the job back until then; a
        time already past means now.

        Raises PayloadError (nothing sent) for a payload its schema rejects,
        ValueError for invalid options, EnqueueError when the queue has no topic
        (or no topic for the delay tier it needs) or Kafka refused the job.
        """
        return self.enqueue_nowait(as_request(queue, type, payload, options)).result()

    @overload
    def enqueue_nowait(self, request: JobRequest, /) -> Future[str]: ...

    @overload
    def enqueue_nowait(
        self,
        queue: str,
        type: str,
        payload: Mapping[str, object],
        **options: Unpack[EnqueueOptions],
    ) -> Future[str]: ...

    def enqueue_nowait(
        self,
        queue: str | JobRequest,
        type: str | None = None,
        payload: Mapping[str, object] | None = None,
        **options: Any,
    ) -> Future[str]:
        """Like :meth:`enqueue`, but returns at once; the future resolves on delivery.

        Validation errors are still raised here, before anything is sent; a
        delivery failure is the future's EnqueueError. One exception to "at once": the
        first job of a tenant diverted as a flood waits for the delivery of the
        tenant's last ready job, usually milliseconds, at most 2 s (``producer.flood``).
        """
        job = self._build(as_request(queue, type, payload, options))
        return self._transport.send(job, self._destination(job))

    def enqueue_batch(self, requests: Iterable[JobRequest]) -> list[str]:
        """Enqueue many jobs at full rate; returns their ids once all were acknowledged.

        Every payload is validated before the first record is produced, so one
        bad request (or a queue without topics) means nothing is sent. Delivery
        failures are collected into one EnqueueError that also lists the jobs
        that did land.
        """
        jobs = []
        for index, request in enumerate(requests):
            try:
                jobs.append(self._build(request))
            except PayloadError as exc:
                raise PayloadError(f"request {index}: {exc}") from exc
        topics = [self._destination(job) for job in jobs]  # all checked before any send
        futures = [self._transport.send(job, t) for job, t in zip(jobs, topics, strict=True)]
        wait_all(futures)
        failures = {
            job.job_id: str(future.exception())
            for job, future in zip(jobs, futures, strict=True)
            if future.exception() is not None
        }
        ids = [job.job_id for job in jobs]
        if failures:
            first = next(iter(failures.values()))
            raise EnqueueError(
                f"{len(failures)} of {len(jobs)} jobs were not delivered (first: {first})",
                failures=failures,
                delivered=[i for i in ids if i not in failures],
            )
        return ids

    def send_job(self, job: Job, *, divert: bool = True) -> Future[Delivered]:
        """Produce a job already built by :func:`producer.request.build_job` (e.g. staged
        in an outbox), exactly as :meth:`enqueue_nowait` produces one: the same topic
        choice, checks, key and headers, and a flood diverted the same way unless
        ``divert`` is False. The future holds where the record landed."""
        kafka = self._kafka_path("send_job")
        self._classes.check(job.priority_class)
        return kafka.send_job(job, divert=divert)

    def diversion_topic(self, queue: str) -> str | None:
        """The topic ``send_job`` may divert a flood of ``queue``'s jobs to (its overflow
        lane), or None when it diverts none: what an outbox relay marks before a batch."""
        return self._kafka_path("diversion_topic").diversion_topic(queue)

    def destination_of(self, job: Job) -> str:
        """The topic ``job`` is written to, checked to exist; raises EnqueueError when
        it does not (see :meth:`_destination`)."""
        return self._destination(job)

    def cancel(
        self, queue: str, job_id: str, *, reason: str = "", wait_s: float = 10.0
    ) -> CancelAnswer:
        """Cancel job ``job_id`` of ``queue`` unless it already ended, and say which case
        applied, as ``producer cancel`` does: the answer's ``outcome``, ``message()`` and
        ``exit_code``, waiting up to ``wait_s`` for a leasekeeper's (``producer.cancel``).

        The leasekeepers of the queue read ``jobs.Q.control`` whole: a cancelled job
        is skipped wherever it waits (a delay tier, the ready topic), and a running
        one loses its lease. Raises CancelError when the cancellation was not recorded.
        """
        from producer.cancel import cancel_job  # which builds on this class

        kafka = self._kafka_path("cancel")
        topics = QueueTopics(queue=queue, prefix=self._prefix)
        return cancel_job(kafka.settings, self, topics, job_id, reason=reason, wait_s=wait_s)

    def record_cancellation(self, queue: str, job_id: str, *, reason: str = "") -> None:
        """Record that job ``job_id`` of ``queue`` must not run; returns once the broker
        acknowledged the record, without asking how the job ended. Cancelling a job
        that already finished, or an unknown id, records the fact and changes nothing.
        Raises CancelError when the cancellation was not recorded."""
        if not job_id:
            raise ValueError("job_id must be a non-empty string")
        kafka = self._kafka_path("record_cancellation")
        cancellation = Cancellation(
            job_id=job_id, cancelled_at_ms=int(self._clock() * 1000), reason=reason
        )
        topics = QueueTopics(queue=queue, prefix=self._prefix)
        try:
            kafka.check_topic(
                topics.control,
                f"queue {queue!r} has no control topic {topics.control}",
                f"create it: producer create-queue {queue} --partitions N (adds missing topics)",
            )
            kafka.produce(
                topics.control,
                key=cancellation.key,
                value=cancellation.encode(),
                record_id=job_id,
                result=lambda _msg: job_id,
            ).result()
        except EnqueueError as exc:
            raise CancelError(f"cancelling job {job_id} was not recorded: {exc}") from exc

    def status(
        self,
        queue: str,
        job_id: str,
        *,
        dashboard: str | None = None,
        token: str | None = None,
        enqueued_at_ms: int | None = None,
    ) -> JobLookup:
        """Where ``job_id`` is or how it ended, and which source said so: the dashboard's
        API at ``dashboard`` (live leases too), else the queue's status topic (finished
        jobs only). See ``producer/lookup.py``."""
        return self._transport.status(
            queue, job_id, dashboard=dashboard, token=token, enqueued_at_ms=enqueued_at_ms
        )

    def result(self, queue: str, job_id: str, *, timeout: float = 30.0,
               window_s: float | None = None, enqueued: bool | None = None) -> object:  # fmt: skip
        """The value job ``job_id`` of ``queue`` returned (None when it returned none),
        waiting up to ``timeout`` s for it to end; found as well when it ended before the
        call, within ``window_s`` (default: the results topic's retention). Raises
        ``JobDied``, ``JobCancelled``, ``ResultTimeout`` or ``JobUnknown`` (all
        ``ResultError``); a job this producer enqueued, or ``enqueued=True``, is never
        unknown. An Avro result (its type has a result schema) is decoded with this
        producer's registry: ``ResultUndecodable`` when it lacks the writer's schema.
        See ``producer/results.py``."""
        kafka = self._kafka_path("result")
        known = job_id in self._enqueued if enqueued is None else enqueued
        topics = QueueTopics(queue=queue, prefix=self._prefix)
        return wait_for_result(kafka.settings, topics, job_id, timeout_s=timeout, known=known,
                               window_s=window_s, registry=self._codec.registry)  # fmt: skip

    async def result_async(self, queue: str, job_id: str, *, timeout: float = 30.0,
                           window_s: float | None = None,
                           enqueued: bool | None = None) -> object:  # fmt: skip
        """:meth:`result` without blocking the event loop (it waits on a worker thread)."""
        call = functools.partial(self.result, queue, job_id, timeout=timeout,
                                 window_s=window_s, enqueued=enqueued)  # fmt: skip
        return await asyncio.get_running_loop().run_in_executor(None, call)

    def flush(self, timeout: float = 30) -> None:
        """Wait until every job produced so far was acknowledged or failed.

        Raises EnqueueError when jobs are still buffered after ``timeout`` s;
        individual failures are reported through their futures.
        """
        self._transport.flush(timeout)

    async def flush_async(self, timeout: float = 30) -> None:
        """:meth:`flush` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.flush, timeout)

    def close(self, timeout: float = 30) -> None:
        """Deliver what is buffered, then stop; jobs still undelivered raise EnqueueError.

        Their futures fail with a purge error rather than hang forever.
        """
        if self._closed:
            return
        self._closed = True
        if self._owns_transport:
            self._transport.close(timeout)
        else:
            self._transport.flush(timeout)

    def __enter__(self) -> JobProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an error is already on its way out: do not replace it
            self.close()
        except EnqueueError:
            log.exception("closing the job producer after an error")

    # -- internals ------------------------------------------------------------

    def _build(self, request: JobRequest) -> Job:
        if self._closed:
            raise RuntimeError("this JobProducer is closed")
        now = self._clock()
        job = build_job(request, codec=self._codec, now=now, job_id=new_job_id(now))
        self._key_classes.check(job)
        self._enqueued.add(job.job_id)  # ``result`` waits for it as for a known job
        return job

    def _destination(self, job: Job) -> str:
        """Where ``job`` goes, from its transport, once its priority class is known to
        this producer (a check of the job, whichever transport carries it)."""
        self._classes.check(job.priority_class)
        return self._transport.destination(job)

    def _kafka_path(self, call: str) -> KafkaTransport:
        """The Kafka transport, for the calls only Kafka carries; a closed producer and
        another transport raise, naming the call."""
        if self._closed:
            raise RuntimeError("this JobProducer is closed")
        if self._kafka is None:
            raise RuntimeError(
                f"JobProducer.{call} needs Kafka; this producer sends through "
                f"{type(self._transport).__name__}"
            )
        return self._kafka
