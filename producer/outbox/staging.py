"""Stage jobs in the application's own PostgreSQL transaction.

A job enqueued straight to Kafka runs even when the transaction that created its
data rolls back (a receipt for an order that never existed). Staged instead, the
job is a row of ``job_outbox`` written by the caller's connection: it commits or
rolls back with the business data, and ``producer outbox relay`` moves committed
rows to Kafka.

A staged job is built and validated exactly as :meth:`JobProducer.enqueue` builds
it (:func:`producer.request.build_job`): a bad payload raises ``PayloadError``
before anything is written, and the job id is assigned here, so the application
can store it with its order. What ``enqueue`` learns only from Kafka is checked
here too, since a staged row the relay can never send is found only later: the
priority class must be one of ``JOBS_PRIORITY_CLASSES``, and the record must fit
the producer's ``message.max.bytes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from jobcore.job_ids import new_job_id
from jobcore.priority import PriorityClasses
from producer.request import JobRequest, build_job
from schemas.codec import EnvelopeCodec, PayloadError, SchemaRegistry
from schemas.job import Job
from schemas.job_headers import job_headers

__all__ = ["MAX_RECORD_BYTES", "Outbox", "StagedJob", "raw_connection", "stage", "stage_many"]

# librdkafka's default message.max.bytes: a larger record is refused by produce() (what
# `enqueue` raises at once). A relay whose --kafka-config raises it: pass the same.
MAX_RECORD_BYTES = 1_000_000
# What librdkafka adds to a record's key, value and headers when it checks that limit.
_RECORD_OVERHEAD = 36

INSERT = "INSERT INTO job_outbox (job_id, queue, tenant_id, envelope) VALUES (%s, %s, %s, %s)"


@dataclass(frozen=True, kw_only=True)
class StagedJob:
    """One row for ``job_outbox``: the job and its encoded envelope."""

    job: Job
    envelope: bytes

    def row(self) -> tuple[str, str, str, bytes]:
        return (self.job.job_id, self.job.queue, self.job.tenant_id, self.envelope)


class Outbox:
    """Builds jobs like ``enqueue`` does and inserts them into ``job_outbox``.

    Holds the schema registry (loaded once), so make one and reuse it. ``clock``
    (epoch seconds) stamps ``created_at`` and turns a ``delay`` into a due time,
    counted from staging. ``classes`` (default: ``JOBS_PRIORITY_CLASSES``, as the
    relay reads it) are the priority classes a request may name; ``max_record_bytes``
    is the relay producer's ``message.max.bytes``.
    """

    def __init__(
        self,
        *,
        registry: SchemaRegistry | None = None,
        clock: Callable[[], float] = time.time,
        classes: PriorityClasses | None = None,
        max_record_bytes: int = MAX_RECORD_BYTES,
    ) -> None:
        self._codec = EnvelopeCodec(registry if registry is not None else SchemaRegistry())
        self._clock = clock
        self._classes = classes if classes is not None else PriorityClasses.from_env()
        self._max_bytes = max_record_bytes

    def build(self, requests: Iterable[JobRequest]) -> list[StagedJob]:
        """Every request built and validated before any row is written."""
        staged = []
        for index, request in enumerate(requests):
            try:
                now = self._clock()
                job = build_job(request, codec=self._codec, now=now, job_id=new_job_id(now),
                                classes=self._classes)  # fmt: skip
                envelope = self._codec.encode(job)
                self._check_size(job, envelope)
            except PayloadError as exc:
                raise PayloadError(f"request {index}: {exc}") from exc
            except ValueError as exc:
                raise ValueError(f"request {index}: {exc}") from exc
            staged.append(StagedJob(job=job, envelope=envelope))
        return staged

    def _check_size(self, job: Job, envelope: bytes) -> None:
        """Refuse a record the relay's producer would refuse as too large, counted as
        librdkafka counts it (key, value, headers and the record's overhead)."""
        headers = [(k.encode(), v) for k, v in job_headers(job, envelope)]
        size = (_RECORD_OVERHEAD + len(job.tenant_id.encode()) + len(envelope)
                + sum(_varint(len(k)) + len(k) + _varint(len(v)) + len(v)
                      for k, v in headers))  # fmt: skip
        if size > self._max_bytes:
            raise PayloadError(
                f"job of type {job.type!r} for queue {job.queue!r} is {size} bytes as a "
                f"record; Kafka takes at most {self._max_bytes} (message.max.bytes): make "
                "the payload smaller, e.g. store the data and pass its id"
            )

    def stage(self, conn: psycopg.Connection[Any], request: JobRequest) -> str:
        """Insert one job in ``conn``'s current transaction; returns its job id."""
        return self.stage_many(conn, [request])[0]

    def stage_many(
        self, conn: psycopg.Connection[Any], requests: Iterable[JobRequest]
    ) -> list[str]:
        """Insert jobs in ``conn``'s current transaction, in order; returns their ids."""
        _check_transaction(conn)
        staged = self.build(requests)
        with conn.cursor() as cur:
            cur.executemany(INSERT, [s.row() for s in staged])
        return [s.job.job_id for s in staged]

    async def stage_async(self, conn: psycopg.AsyncConnection[Any], request: JobRequest) -> str:
        """:meth:`stage` on an async connection."""
        return (await self.stage_many_async(conn, [request]))[0]

    async def stage_many_async(
        self, conn: psycopg.AsyncConnection[Any], requests: Iterable[JobRequest]
    ) -> list[str]:
        """:meth:`stage_many` on an async connection."""
        _check_transaction(conn)
        staged = self.build(requests)
        async with conn.cursor() as cur:
            await cur.executemany(INSERT, [s.row() for s in staged])
        return [s.job.job_id for s in staged]


def _check_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Refuse an autocommit connection outside a transaction block: the row would
    commit at once, and the job run even if the business transaction later fails,
    which is what the outbox is for. ``with conn.transaction():`` on it is fine."""
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise ValueError(
            "cannot stage on an autocommit connection outside a transaction: the job "
            "would commit at once, even if the business transaction fails; stage inside "
            "`with conn.transaction():` or on a connection with autocommit off"
        )


def _varint(n: int) -> int:
    """Bytes of ``n`` as a zigzag varint, as a record header's lengths are written."""
    zigzag, size = n << 1, 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def stage(
    conn: psycopg.Connection[Any], request: JobRequest, *, registry: SchemaRegistry | None = None
) -> str:
    """Stage one job in ``conn``'s transaction (loads the schemas each call: for many
    calls, make one :class:`Outbox`)."""
    return Outbox(registry=registry).stage(conn, request)


def stage_many(
    conn: psycopg.Connection[Any],
    requests: Iterable[JobRequest],
    *,
    registry: SchemaRegistry | None = None,
) -> list[str]:
    """Stage jobs in ``conn``'s transaction; see :func:`stage`."""
    return Outbox(registry=registry).stage_many(conn, requests)


def raw_connection(sa: Any) -> Any:
    """The psycopg connection under a SQLAlchemy ``Connection`` or ``Session``, so a
    job is staged in the same transaction as the ORM's writes::

        outbox.stage(raw_connection(session), request)

    SQLAlchemy must use the psycopg 3 driver (``postgresql+psycopg://``).
    """
    if hasattr(sa, "get_bind") and callable(getattr(sa, "connection", None)):
        sa = sa.connection()  # a Session: its Connection in the current transaction
    driver = getattr(getattr(sa, "connection", None), "driver_connection", None)
    if not isinstance(driver, psycopg.Connection | psycopg.AsyncConnection):
        raise TypeError(
            f"expected a SQLAlchemy Connection or Session on the psycopg driver, got "
            f"{type(sa).__name__} (driver connection {type(driver).__name__}); use a "
            "postgresql+psycopg:// URL"
        )
    return driver
