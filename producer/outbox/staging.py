"""Stage jobs in the application's own PostgreSQL transaction.

A job enqueued straight to Kafka runs even when the transaction that created its
data rolls back (a receipt for an order that never existed). Staged instead, the
job is a row of ``job_outbox`` written by the caller's connection: it commits or
rolls back with the business data, and ``producer outbox relay`` moves committed
rows to Kafka.

A staged job is built and validated exactly as :meth:`JobProducer.enqueue` builds
it (:func:`producer.request.build_job`): a bad payload raises ``PayloadError``
before anything is written, and the job id is assigned here, so the application
can store it with its order.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from producer.request import JobRequest, build_job
from schemas.codec import EnvelopeCodec, PayloadError, SchemaRegistry
from schemas.job import Job

__all__ = ["Outbox", "StagedJob", "raw_connection", "stage", "stage_many"]

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
    counted from staging.
    """

    def __init__(
        self,
        *,
        registry: SchemaRegistry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._codec = EnvelopeCodec(registry if registry is not None else SchemaRegistry())
        self._clock = clock

    def build(self, requests: Iterable[JobRequest]) -> list[StagedJob]:
        """Every request built and validated before any row is written."""
        staged = []
        for index, request in enumerate(requests):
            try:
                job = build_job(
                    request, codec=self._codec, now=self._clock(), job_id=uuid.uuid4().hex
                )
            except PayloadError as exc:
                raise PayloadError(f"request {index}: {exc}") from exc
            staged.append(StagedJob(job=job, envelope=self._codec.encode(job)))
        return staged

    def stage(self, conn: psycopg.Connection[Any], request: JobRequest) -> str:
        """Insert one job in ``conn``'s current transaction; returns its job id."""
        return self.stage_many(conn, [request])[0]

    def stage_many(
        self, conn: psycopg.Connection[Any], requests: Iterable[JobRequest]
    ) -> list[str]:
        """Insert jobs in ``conn``'s current transaction, in order; returns their ids."""
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
        staged = self.build(requests)
        async with conn.cursor() as cur:
            await cur.executemany(INSERT, [s.row() for s in staged])
        return [s.job.job_id for s in staged]


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
