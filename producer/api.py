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
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar, overload

from jobcore.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_S, schema_path_from_env
from jobcore.control import Cancellation
from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import (
    KafkaException,
    KafkaSettings,
    Message,
    describe_setup_error,
    make_producer,
    produce_reliably,
)
from jobcore.priority import PriorityClasses
from jobcore.topics import DEFAULT_PREFIX, QueueTopics
from producer.diversion import Diverter, Route
from producer.errors import CancelError, EnqueueError, MissingTopic, delivery_reporter
from producer.flood import FloodGate, FloodPolicy
from producer.lookup import JobLookup, lookup
from producer.ordering_keys import KeyClasses
from producer.request import JobRequest, as_request, build_job, destination
from producer.results import RecentIds, wait_for_result
from producer.status import CancelAnswer
from schemas.codec import EnvelopeCodec, PayloadError, SchemaRegistry
from schemas.job import Job
from schemas.job_headers import job_headers

__all__ = [
    "CancelError",
    "Delivered",
    "EnqueueError",
    "JobProducer",
    "JobRequest",
    "MissingTopic",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# How long a producer that found no overflow topic (or could not look it up) keeps its
# floods in the ready topic before it looks again.
OVERFLOW_RECHECK_S = 60.0


@dataclass(frozen=True, kw_only=True)
class Delivered:
    """Where the broker put a job's record (what an outbox relay remembers)."""

    job_id: str
    topic: str
    partition: int
    offset: int

    @classmethod
    def of(cls, job_id: str, message: Message) -> Delivered:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        assert topic is not None and partition is not None and offset is not None
        return cls(job_id=job_id, topic=topic, partition=partition, offset=offset)


class JobProducer:
    """Enqueue jobs onto ``<prefix>.<queue>`` topics, keyed by tenant.

    Owns one idempotent ``acks=all`` Kafka producer. A background thread serves
    its delivery reports, so the futures of :meth:`enqueue_nowait` resolve
    without the caller polling. Safe to share between threads; close it (or use
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
        settings: KafkaSettings,
        *,
        registry: SchemaRegistry | None = None,
        prefix: str = DEFAULT_PREFIX,
        tiers: DelayTiers | None = None,
        classes: PriorityClasses | None = None,
        clock: Callable[[], float] = time.time,
        flood: FloodPolicy | None = None,
    ) -> None:
        # Without a registry, the schemas a CLI would load: the package's own and
        # JOBS_SCHEMA_PATH's, so a caller following the README finds its types.
        if registry is None:
            registry = SchemaRegistry(extra_dirs=schema_path_from_env())
        self._codec = EnvelopeCodec(registry)
        self._prefix = prefix
        self._topics: dict[str, QueueTopics] = {}  # per queue name: built once
        self._tiers = tiers if tiers is not None else DelayTiers()
        self._classes = classes if classes is not None else PriorityClasses.from_env()
        self._key_classes = KeyClasses()
        self._clock = clock
        self._producer = make_producer(settings)
        self._settings = settings
        self._watch = settings.watch
        self._known_topics: set[str] = set()
        self._enqueued = RecentIds()
        self._no_overflow: dict[str, float] = {}  # topic → when to look again
        policy = flood if flood is not None else FloodPolicy.from_env()
        self._diverter = (
            Diverter(
                settings=settings,
                gate=FloodGate(policy=policy),
                prefix=prefix,
                overflow_exists=self._overflow_exists,
            )
            if policy.enabled
            else None
        )
        self._closed = threading.Event()
        self._poller = threading.Thread(
            target=self._serve_delivery_reports, name="job-producer-delivery", daemon=True
        )
        self._poller.start()

    @overload
    def enqueue(self, request: JobRequest, /) -> str: ...

    @overload
    def enqueue(
        self,
        queue: str,
        type: str,
        payload: Mapping[str, object],
        *,
        tenant_id: str,
        dedupe_key: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        ordering_key: str | None = None,
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
        *,
        tenant_id: str,
        dedupe_key: str | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: str | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        ordering_key: str | None = None,
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
        return self._send(job, self._destination(job))

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
        futures = [self._send(job, topic) for job, topic in zip(jobs, topics, strict=True)]
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

    def send_job(self, job: Job) -> Future[Delivered]:
        """Produce a job already built by :func:`producer.request.build_job` (e.g. staged
        in an outbox), exactly as :meth:`enqueue_nowait` produces one: the same topic
        choice, checks, key and headers. The future holds where the record landed."""
        if self._closed.is_set():
            raise RuntimeError("this JobProducer is closed")
        value = self._codec.encode(job)
        return self._produce(
            self.destination_of(job),
            key=job.tenant_id.encode(),
            value=value,
            headers=job_headers(job, value),
            record_id=job.job_id,
            result=lambda msg: Delivered.of(job.job_id, msg),
        )

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

        topics = QueueTopics(queue=queue, prefix=self._prefix)
        return cancel_job(self._settings, self, topics, job_id, reason=reason, wait_s=wait_s)

    def record_cancellation(self, queue: str, job_id: str, *, reason: str = "") -> None:
        """Record that job ``job_id`` of ``queue`` must not run; returns once the broker
        acknowledged the record, without asking how the job ended. Cancelling a job
        that already finished, or an unknown id, records the fact and changes nothing.
        Raises CancelError when the cancellation was not recorded."""
        if not job_id:
            raise ValueError("job_id must be a non-empty string")
        if self._closed.is_set():
            raise RuntimeError("this JobProducer is closed")
        cancellation = Cancellation(
            job_id=job_id, cancelled_at_ms=int(self._clock() * 1000), reason=reason
        )
        topics = QueueTopics(queue=queue, prefix=self._prefix)
        try:
            self._check_topic(
                topics.control,
                f"queue {queue!r} has no control topic {topics.control}",
                f"create it: producer create-queue {queue} --partitions N (adds missing topics)",
            )
            self._produce(
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
        return lookup(
            self._settings,
            queue,
            job_id,
            prefix=self._prefix,
            dashboard=dashboard,
            token=token,
            enqueued_at_ms=enqueued_at_ms,
        )

    def result(self, queue: str, job_id: str, *, timeout: float = 30.0,
               window_s: float | None = None, enqueued: bool | None = None) -> object:  # fmt: skip
        """The value job ``job_id`` of ``queue`` returned (None when it returned none),
        waiting up to ``timeout`` s for it to end; found as well when it ended before the
        call, within ``window_s`` (default: the results topic's retention). Raises
        ``JobDied``, ``JobCancelled``, ``ResultTimeout`` or ``JobUnknown`` (all
        ``ResultError``); a job this producer enqueued, or ``enqueued=True``, is never
        unknown. See ``producer/results.py``."""
        known = job_id in self._enqueued if enqueued is None else enqueued
        topics = QueueTopics(queue=queue, prefix=self._prefix)
        return wait_for_result(self._settings, topics, job_id, timeout_s=timeout, known=known,
                               window_s=window_s)  # fmt: skip

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
        remaining = self._producer.flush(timeout)
        if remaining:
            raise EnqueueError(f"{remaining} jobs still undelivered after {timeout:g}s")

    async def flush_async(self, timeout: float = 30) -> None:
        """:meth:`flush` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.flush, timeout)

    def close(self, timeout: float = 30) -> None:
        """Deliver what is buffered, then stop; jobs still undelivered raise EnqueueError.

        Their futures fail with a purge error rather than hang forever.
        """
        if self._closed.is_set():
            return
        try:
            remaining = self._producer.flush(timeout)
            if remaining:
                self._producer.purge()
                self._producer.flush(0)
        finally:
            self._closed.set()
            self._poller.join()
            if self._diverter is not None:
                self._diverter.close()
        if remaining:
            raise EnqueueError(f"closed with {remaining} jobs undelivered after {timeout:g}s")

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
        if self._closed.is_set():
            raise RuntimeError("this JobProducer is closed")
        job = build_job(request, codec=self._codec, now=self._clock(), job_id=uuid.uuid4().hex)
        self._key_classes.check(job)
        self._enqueued.add(job.job_id)  # ``result`` waits for it as for a known job
        return job

    def _send(self, job: Job, topic: str) -> Future[str]:
        """Produce ``job`` keyed by its tenant (a tier keeps the tenant's partition), with
        the headers the leasekeeper reads it by (``schemas.job_headers``). A due-now job
        without an ordering key may be diverted to the overflow lane (``producer.flood``;
        a keyed job's line lives in its class topic)."""
        value = self._codec.encode(job)
        headers = job_headers(job, value)
        diverter = self._diverter
        route = (
            None
            if diverter is None or job.ordering_key is not None or job.run_at_ms > job.created_at_ms
            else diverter.route(job, topic)
        )
        if route is None:
            return self._produce(
                topic,
                key=job.tenant_id.encode(),
                value=value,
                headers=headers,
                record_id=job.job_id,
                result=lambda _msg: job.job_id,
            )
        future = route.future = self._produce(
            route.topic,
            key=job.tenant_id.encode(),
            value=value,
            headers=[*headers, *route.headers] if route.headers else headers,
            record_id=job.job_id,
            result=lambda msg: _routed(route, msg, job.job_id),
        )
        if route.diverted:
            future.add_done_callback(lambda done: route.failed() if done.exception() else None)
        return future

    def _overflow_exists(self, topic: str) -> bool:
        """Whether the queue has its overflow lane (queues made by an older
        ``create-queue`` may not): without it, a flood stays in its ready topic. Asked
        once per topic: a flood must not ask the broker for every job."""
        if time.monotonic() < self._no_overflow.get(topic, 0.0):
            return False
        try:
            self._check_topic(topic, f"no overflow topic {topic}")
        except EnqueueError as exc:
            log.warning("%s: floods are not diverted (producer create-queue adds it)", exc)
            # Asked again later: the topic may be added, or the broker come back.
            self._no_overflow[topic] = time.monotonic() + OVERFLOW_RECHECK_S
            return False
        return True

    def _produce(
        self,
        topic: str,
        *,
        key: bytes,
        value: bytes,
        record_id: str,
        result: Callable[[Message], _T],
        headers: list[tuple[str, bytes]] | None = None,
    ) -> Future[_T]:
        """The future holds ``result(message)`` once acknowledged, or the EnqueueError
        that stopped the record."""
        future: Future[_T] = Future()
        future.set_running_or_notify_cancel()  # a produced record cannot be withdrawn
        try:
            produce_reliably(
                self._producer,
                topic,
                key=key,
                value=value,
                headers=headers or [("job_id", record_id.encode())],
                on_delivery=delivery_reporter(future, record_id, result),
            )
        except KafkaException as exc:  # refused locally, e.g. larger than message.max.bytes
            future.set_exception(
                EnqueueError(
                    f"job {record_id} was not produced: {exc}", failures={record_id: str(exc)}
                )
            )
        return future

    def _destination(self, job: Job) -> str:
        """The topic ``job`` goes to, checked to exist (see :meth:`_check_topic`).

        The ready topic is checked even for a delayed job: a missing queue is the
        likelier mistake and has the clearer fix.
        """
        topics = self._topics.get(job.queue)
        if topics is None:
            topics = self._topics[job.queue] = QueueTopics(queue=job.queue, prefix=self._prefix)
        self._classes.check(job.priority_class)
        self._check_topic(
            topics.ready,
            f"queue {job.queue!r} has no topic {topics.ready}",
            f"create it first: producer create-queue {job.queue} --partitions N",
        )
        topic = destination(job, topics, self._tiers)
        if topic == topics.of_class(job.priority_class) and topic != topics.ready:
            self._check_topic(
                topic,
                f"queue {job.queue!r} has no topic {topic} for priority class "
                f"{job.priority_class!r}",
                f"add it: producer create-queue {job.queue} --partitions N (adds missing topics)",
            )
        elif topic != topics.ready:
            self._check_topic(
                topic,
                f"queue {job.queue!r} has no delay tier topic {topic}",
                f"this producer's tiers ({','.join(self._tiers.names)}) must be the "
                "leasekeeper's --retry-tiers, which creates their topics when it starts "
                f"(or: producer create-queue {job.queue} --partitions N --retry-tiers ...)",
            )
        return topic

    def _check_topic(self, topic: str, missing: str, fix: str = "") -> None:
        """Fail at once, before anything is sent, when ``topic`` does not exist, rather
        than after librdkafka's metadata timeout; each topic is looked up once."""
        if topic in self._known_topics:
            return
        try:
            metadata = self._producer.list_topics(topic, timeout=10)
        except KafkaException as exc:
            # A wrong password shows only as a timeout here; error_cb knows why.
            setup = self._watch.setup_error()
            if setup is not None:
                raise EnqueueError(describe_setup_error(setup)) from None
            raise EnqueueError(f"cannot look up topic {topic}: {exc}") from exc
        error = metadata.topics[topic].error if topic in metadata.topics else None
        if topic not in metadata.topics or error is not None:
            raise MissingTopic(f"{missing} ({error}){'; ' + fix if fix else ''}")
        self._known_topics.add(topic)

    def _serve_delivery_reports(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(0.1)
            except Exception:
                log.exception("serving delivery reports")


def _routed(route: Route, message: Message, job_id: str) -> str:
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None
    route.delivered(partition, offset)
    return job_id
