from __future__ import annotations

from django.db import models


class Order(models.Model):
    """An order; ``receipt_job`` is the id of the job that emails its receipt."""

    tenant = models.CharField(max_length=100)
    email = models.CharField(max_length=254)
    amount_cents = models.BigIntegerField()
    receipt_job = models.CharField(max_length=32, blank=True)
