"""The worker side of the example: ``workers run examples.fastapi.jobs:app --queue emails``.

An ``async def`` handler, as a service built on FastAPI tends to write them; it runs
on the worker's event loop (and in the tests, eagerly, on a private one).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from workers import App, JobContext, Permanent

app = App("receipts")
log = logging.getLogger(__name__)


@app.job("send_receipt")
async def send_receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
    if "@" not in payload["email"]:
        raise Permanent(f"not an address: {payload['email']}")  # straight to the DLQ
    await asyncio.sleep(0)  # stands in for the mail API's call, with ctx.job_id as its key
    log.info("receipt for order %s sent (job %s)", payload["order_id"], ctx.job_id)
