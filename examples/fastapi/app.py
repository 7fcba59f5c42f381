"""``uvicorn examples.fastapi.app:api``: enqueue a receipt, then ask how it went.

One ``JobProducer`` for the whole app, made in the lifespan (it owns a Kafka
connection and a delivery thread: one per process, not per request) and closed at
shutdown, which delivers what is still buffered. ``create_app`` takes the
factory, so a test hands it an eager producer instead (``tests/``).

``POST /receipts`` validates the payload against the job type's schema before
anything is sent (422 with the field named otherwise) and answers 202 with the job
id once Kafka acknowledged the job; it awaits the acknowledgement without blocking
the event loop (``enqueue_nowait`` and ``asyncio.wrap_future``).
``GET /receipts/{job_id}`` reports where the job is or how it ended
(``JobProducer.status``: the status topic, or the dashboard when
``JOBS_DASHBOARD`` names it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

from jobcore.kafka import KafkaSettings
from producer import EnqueueError, JobProducer, PayloadError

QUEUE = "emails"


class Receipt(BaseModel):
    tenant: str = Field(min_length=1)
    order_id: int
    email: str
    amount_cents: int
    currency: str = "EUR"


class Enqueued(BaseModel):
    job_id: str
    status_url: str


class Status(BaseModel):
    job_id: str
    state: str
    source: str
    attempt: int | None = None
    reason: str | None = None
    last_error: str | None = None
    note: str | None = None


def producer_from_env() -> JobProducer:
    """The production producer: Kafka at ``KAFKA_BOOTSTRAP``."""
    settings = KafkaSettings(bootstrap=os.environ["KAFKA_BOOTSTRAP"], client_id="receipts-api")
    return JobProducer(settings)


def producer_of(request: Request) -> JobProducer:
    """The app's one producer, made in its lifespan."""
    producer: JobProducer = request.app.state.producer
    return producer


Producer = Annotated[JobProducer, Depends(producer_of)]


def create_app(make_producer: Callable[[], JobProducer] = producer_from_env) -> FastAPI:
    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        producer = make_producer()
        api.state.producer = producer
        try:
            yield
        finally:
            # close() waits for the broker's acknowledgements: off the event loop.
            await asyncio.to_thread(producer.close)

    api = FastAPI(title="receipts", lifespan=lifespan)

    @api.post("/receipts", status_code=202)
    async def enqueue_receipt(receipt: Receipt, producer: Producer) -> Enqueued:
        payload = receipt.model_dump(exclude={"tenant"})
        try:
            future = producer.enqueue_nowait(
                QUEUE, "send_receipt", payload, tenant_id=receipt.tenant
            )
            job_id = await asyncio.wrap_future(future)
        except PayloadError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        except EnqueueError as exc:
            raise HTTPException(status_code=503, detail=f"not enqueued: {exc}") from None
        return Enqueued(job_id=job_id, status_url=f"/receipts/{job_id}")

    @api.get("/receipts/{job_id}")
    def receipt_status(job_id: str, producer: Producer) -> Status:
        # A plain def: FastAPI runs it on a thread, and the lookup reads Kafka.
        report = producer.status(QUEUE, job_id, dashboard=os.environ.get("JOBS_DASHBOARD"))
        return Status(
            job_id=report.job_id,
            state=report.state.value,
            source=report.source,
            attempt=report.attempt,
            reason=report.reason,
            last_error=report.last_error,
            note=report.note,
        )

    return api


api = create_app()
