"""The shop's two ways of sending a receipt, as a view or a task would call them."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from examples.django.shop.models import Order
from examples.django.shop.queueing import Jobs
from producer import JobRequest


def receipt(order: Order) -> JobRequest:
    return JobRequest(
        queue=settings.JOBS_QUEUE,
        type="send_receipt",
        payload={"order_id": order.pk, "email": order.email, "amount_cents": order.amount_cents},
        tenant_id=order.tenant,
    )


def place_order(jobs: Jobs, *, tenant: str, email: str, amount_cents: int) -> Order:
    """The order and its receipt's job commit together, or neither does."""
    with transaction.atomic():
        order: Order = Order.objects.create(tenant=tenant, email=email, amount_cents=amount_cents)
        order.receipt_job = jobs.stage(receipt(order))
        order.save(update_fields=["receipt_job"])
    return order


def resend_receipt(jobs: Jobs, order: Order) -> str:
    """A committed order's receipt again: nothing to wait for, so enqueued at once."""
    return jobs.enqueue(receipt(order))
