"""How the shop enqueues: at once, or as part of the current database transaction.

- ``enqueue``: straight to Kafka through the process's ``JobProducer``; the job
  runs whatever the transaction around it does later (right for a job that does
  not depend on uncommitted data, e.g. resending a receipt).
- ``stage``: a row of ``job_outbox`` written on Django's own connection, inside the
  caller's ``transaction.atomic()``: the job exists exactly when the order does,
  and ``producer outbox relay`` sends it once committed. Django's
  ``connection.connection`` is a psycopg connection on PostgreSQL.

Made once per process, when first used (``ShopConfig.jobs``); a test hands the app
eager mode's producer and outbox instead (``tests/``).
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from django.db import connection

from jobcore.kafka import KafkaSettings
from producer import JobProducer, JobRequest


class Stager(Protocol):
    """``producer.outbox.Outbox``, or eager mode's stand-in."""

    def stage(self, conn: Any, request: JobRequest, /) -> str: ...


class Jobs:
    def __init__(self, producer: JobProducer, outbox: Stager) -> None:
        self.producer = producer
        self.outbox = outbox

    def enqueue(self, request: JobRequest) -> str:
        """Enqueue now; returns once Kafka has the job."""
        return self.producer.enqueue(request)

    def stage(self, request: JobRequest) -> str:
        """Stage in the current transaction (call it inside ``transaction.atomic()``)."""
        connection.ensure_connection()
        return self.outbox.stage(connection.connection, request)


def from_environment() -> Jobs:
    """Kafka at ``KAFKA_BOOTSTRAP``, the outbox on the default database."""
    from producer.outbox import Outbox  # needs psycopg: the outbox extra

    settings = KafkaSettings(bootstrap=os.environ["KAFKA_BOOTSTRAP"], client_id="shop")
    return Jobs(JobProducer(settings), Outbox())
