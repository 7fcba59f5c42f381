"""Where a validated job goes: the seam between ``JobProducer`` and Kafka.

``JobProducer`` checks a request and builds its envelope (schemas, options,
ordering keys, priority classes), then hands the job to its transport. The
default transport, :class:`KafkaTransport`, is the producer's Kafka path: it picks
the topic (ready, class or delay tier; the overflow lane for a flood), checks the
topic exists, and produces the record on an idempotent ``acks=all`` producer.

Another transport (the testing package's eager mode, which runs the job inline)
satisfies :class:`Transport`, so code under test keeps calling the one
``JobProducer`` it calls in production, with the same validation and errors.
Nothing here imports a transport other than Kafka's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, TypeVar

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import (
    KafkaError,
    KafkaException,
    KafkaSettings,
    Message,
    describe_setup_error,
    make_producer,
    produce_reliably,
)
from jobcore.topics import QueueTopics
from producer.diversion import Diverter, Route
from producer.errors import EnqueueError, MissingTopic
from producer.flood import FloodGate, FloodPolicy
from producer.lookup import JobLookup, lookup
from producer.request import destination
from schemas.codec import EnvelopeCodec
from schemas.job import Job
from schemas.job_headers import job_headers

__all__ = ["Delivered", "KafkaTransport", "Transport", "install_transport", "installed_transport"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# How long a producer that found no overflow topic (or could not look it up) keeps its
# floods in the ready topic before it looks again.
OVERFLOW_RECHECK_S = 60.0


class Transport(Protocol):
    """What a ``JobProducer`` hands its validated jobs to.

    ``destination`` names where a job goes (for Kafka, its topic, checked to exist)
    and is asked for every job of a batch before the first ``send``, so a job that
    cannot go anywhere stops the batch with nothing sent (EnqueueError, MissingTopic).
    ``send`` returns a future holding the job's id once the job was accepted (for
    Kafka, acknowledged), or the EnqueueError that stopped it. ``status`` answers
    ``JobProducer.status``.
    """

    def destination(self, job: Job) -> str: ...

    def send(self, job: Job, topic: str) -> Future[str]: ...

    def status(
        self,
        queue: str,
        job_id: str,
        *,
        dashboard: str | None,
        token: str | None,
        enqueued_at_ms: int | None,
    ) -> JobLookup: ...

    def flush(self, timeout: float) -> None: ...

    def close(self, timeout: float) -> None: ...


_installed: list[Transport | None] = [None]


def install_transport(transport: Transport | None) -> Transport | None:
    """Every ``JobProducer`` made without a transport of its own uses ``transport``
    from now on (None: Kafka again); returns the one installed before. For tests:
    code under test that builds its own producer deep inside (eager mode, the
    ``jobs_eager`` marker of ``jobtesting``) is reached without a change to it. The
    runtime never installs one. A producer does not close a transport it was lent."""
    previous = _installed[0]
    _installed[0] = transport
    return previous


def installed_transport() -> Transport | None:
    return _installed[0]


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


class KafkaTransport:
    """The producer's Kafka path: one idempotent ``acks=all`` producer, and a
    background thread serving its delivery reports, so futures resolve without the
    caller polling. ``tiers`` must be the leasekeeper's ``--retry-tiers``."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        codec: EnvelopeCodec,
        prefix: str,
        tiers: DelayTiers,
        flood: FloodPolicy,
    ) -> None:
        self._codec = codec
        self._prefix = prefix
        self._tiers = tiers
        self._topics: dict[str, QueueTopics] = {}  # per queue name: built once
        self._producer = make_producer(settings)
        self.settings = settings
        self._watch = settings.watch
        self._known_topics: set[str] = set()
        self._no_overflow: dict[str, float] = {}  # topic → when to look again
        self._diverter = (
            Diverter(
                settings=settings,
                gate=FloodGate(policy=flood),
                prefix=prefix,
                overflow_exists=self._overflow_exists,
            )
            if flood.enabled
            else None
        )
        self._closed = threading.Event()
        self._poller = threading.Thread(
            target=self._serve_delivery_reports, name="job-producer-delivery", daemon=True
        )
        self._poller.start()

    def send(self, job: Job, topic: str) -> Future[str]:
        """Produce ``job`` keyed by its tenant (a tier keeps the tenant's partition), with
        the headers the leasekeeper reads it by (``schemas.job_headers``). A due-now job
        without an ordering key may be diverted to the overflow lane (``producer.flood``;
        a keyed job's line lives in its class topic)."""
        return self._send(job, topic, lambda _msg: job.job_id, divert=True)

    def send_job(self, job: Job, *, divert: bool = True) -> Future[Delivered]:
        """Produce ``job`` to its destination as ``send`` does, diverted alike unless
        ``divert`` is False (the outbox relay writes floods too); the future holds where
        the record landed."""
        return self._send(
            job, self.destination(job), lambda msg: Delivered.of(job.job_id, msg), divert=divert
        )

    def diversion_topic(self, queue: str) -> str | None:
        """The topic a flood of ``queue``'s jobs may be diverted to (its overflow lane),
        or None when this producer diverts none (diversion off, or no such topic): what
        the outbox relay must also mark before a batch."""
        if self._diverter is None:
            return None
        overflow = self._topics_of(queue).overflow
        return overflow if self._overflow_exists(overflow) else None

    def _send(
        self, job: Job, topic: str, result: Callable[[Message], _T], *, divert: bool
    ) -> Future[_T]:
        value = self._codec.encode(job)
        headers = job_headers(job, value)
        diverter = self._diverter if divert else None
        route = (
            None
            if diverter is None or job.ordering_key is not None or job.run_at_ms > job.created_at_ms
            else diverter.route(job, topic)
        )
        if route is None:
            return self.produce(
                topic,
                key=job.tenant_id.encode(),
                value=value,
                headers=headers,
                record_id=job.job_id,
                result=result,
            )
        future = self.produce(
            route.topic,
            key=job.tenant_id.encode(),
            value=value,
            headers=[*headers, *route.headers] if route.headers else headers,
            record_id=job.job_id,
            result=lambda msg: _routed(route, msg, result),
        )
        route.future = future
        if route.diverted:
            future.add_done_callback(lambda done: route.failed() if done.exception() else None)
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
        return lookup(
            self.settings,
            queue,
            job_id,
            prefix=self._prefix,
            dashboard=dashboard,
            token=token,
            enqueued_at_ms=enqueued_at_ms,
            registry=self._codec.registry,
        )

    def flush(self, timeout: float) -> None:
        remaining = self._producer.flush(timeout)
        if remaining:
            raise EnqueueError(f"{remaining} jobs still undelivered after {timeout:g}s")

    def close(self, timeout: float) -> None:
        """Deliver what is buffered, then stop; purge (and fail the futures of) what is
        still undelivered after ``timeout``, rather than let them hang forever."""
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

    def produce(
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
                on_delivery=_reporter(future, record_id, result),
            )
        except KafkaException as exc:  # refused locally, e.g. larger than message.max.bytes
            future.set_exception(
                EnqueueError(
                    f"job {record_id} was not produced: {exc}", failures={record_id: str(exc)}
                )
            )
        return future

    def _topics_of(self, queue: str) -> QueueTopics:
        topics = self._topics.get(queue)
        if topics is None:
            topics = self._topics[queue] = QueueTopics(queue=queue, prefix=self._prefix)
        return topics

    def destination(self, job: Job) -> str:
        """The topic ``job`` goes to, checked to exist (see :meth:`check_topic`).

        The ready topic is checked even for a delayed job: a missing queue is the
        likelier mistake and has the clearer fix.
        """
        topics = self._topics_of(job.queue)
        self.check_topic(
            topics.ready,
            f"queue {job.queue!r} has no topic {topics.ready}",
            f"create it first: producer create-queue {job.queue} --partitions N",
        )
        topic = destination(job, topics, self._tiers)
        if topic == topics.of_class(job.priority_class) and topic != topics.ready:
            self.check_topic(
                topic,
                f"queue {job.queue!r} has no topic {topic} for priority class "
                f"{job.priority_class!r}",
                f"add it: producer create-queue {job.queue} --partitions N (adds missing topics)",
            )
        elif topic != topics.ready:
            self.check_topic(
                topic,
                f"queue {job.queue!r} has no delay tier topic {topic}",
                f"this producer's tiers ({','.join(self._tiers.names)}) must be the "
                "leasekeeper's --retry-tiers, which creates their topics when it starts "
                f"(or: producer create-queue {job.queue} --partitions N --retry-tiers ...)",
            )
        return topic

    def check_topic(self, topic: str, missing: str, fix: str = "") -> None:
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

    def _overflow_exists(self, topic: str) -> bool:
        """Whether the queue has its overflow lane (queues made by an older
        ``create-queue`` may not): without it, a flood stays in its ready topic. Asked
        once per topic: a flood must not ask the broker for every job."""
        if time.monotonic() < self._no_overflow.get(topic, 0.0):
            return False
        try:
            self.check_topic(topic, f"no overflow topic {topic}")
        except EnqueueError as exc:
            log.warning("%s: floods are not diverted (producer create-queue adds it)", exc)
            # Asked again later: the topic may be added, or the broker come back.
            self._no_overflow[topic] = time.monotonic() + OVERFLOW_RECHECK_S
            return False
        return True

    def _serve_delivery_reports(self) -> None:
        while not self._closed.is_set():
            try:
                self._producer.poll(0.1)
            except Exception:
                log.exception("serving delivery reports")


def _routed(route: Route, message: Message, result: Callable[[Message], _T]) -> _T:
    partition, offset = message.partition(), message.offset()
    assert partition is not None and offset is not None
    route.delivered(partition, offset)
    return result(message)


def _reporter(
    future: Future[_T], job_id: str, result: Callable[[Message], _T]
) -> Callable[[KafkaError | None, Message], None]:
    def report(error: KafkaError | None, message: Message) -> None:
        if error is None:
            future.set_result(result(message))
        else:
            future.set_exception(
                EnqueueError(
                    f"job {job_id} was not delivered: {error}", failures={job_id: str(error)}
                )
            )

    return report
