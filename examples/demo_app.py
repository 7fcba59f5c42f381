"""The demo's worker app: receipts and image resizes with realistic hiccups.

Run it with ``workers run examples.demo_app:app``. A few receipts fail with a
transient error, so the demo shows retries as well as successes, and a receipt for a
negative amount fails for good, so it shows dead letters too.
"""

from __future__ import annotations

import random
import time
from typing import Any

from workers.app import App
from workers.context import JobContext
from workers.errors import Permanent

app = App("demo")


class PartnerTimeout(Exception):
    """The mail provider did not answer in time (transient: retried)."""


@app.job("send_receipt")
def send_receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
    # job_id is the idempotency key a real mail API would receive.
    if payload["amount_cents"] < 0:
        raise Permanent(f"order {payload['order_id']}: a refund is not a receipt")
    time.sleep(random.uniform(0.02, 0.08))
    if random.random() < 0.05:
        raise PartnerTimeout(f"mail API timed out for order {payload['order_id']}")


@app.job("resize_image")
async def resize_image(ctx: JobContext, payload: dict[str, Any]) -> None:
    import asyncio

    await asyncio.sleep(random.uniform(0.05, 0.2))
