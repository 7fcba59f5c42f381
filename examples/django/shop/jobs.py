"""The shop's worker app: ``python examples/django/manage.py runworker``."""

from __future__ import annotations

import logging
from typing import Any

from workers import App, JobContext, Permanent

app = App("shop")
log = logging.getLogger(__name__)


@app.job("send_receipt")
def send_receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
    if "@" not in payload["email"]:
        raise Permanent(f"not an address: {payload['email']}")  # straight to the DLQ
    # ctx.job_id is the mail API's idempotency key: a retried job sends one mail.
    log.info("receipt for order %s sent (job %s)", payload["order_id"], ctx.job_id)
