"""The shop's enqueueing, under Django's ``TestCase`` with eager mode: no Kafka, no
PostgreSQL. Staged jobs run when the transaction commits (eager mode's outbox on
Django's ``transaction.on_commit``), so a rolled-back order leaves no job."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import transaction
from django.test import TestCase

from examples.django.shop import jobs as shop_jobs
from examples.django.shop.management.commands.runworker import APP, worker_argv
from examples.django.shop.models import Order
from examples.django.shop.orders import place_order, resend_receipt
from examples.django.shop.queueing import Jobs
from jobtesting import Eager, eager
from schemas.codec import SchemaRegistry
from workers.loading import load_app


class OrderError(Exception):
    """Something after the order failed, so its transaction rolls back."""


class EnqueueingTest(TestCase):
    def setUp(self) -> None:
        self.eager: Eager = eager(shop_jobs.app, registry=SchemaRegistry())
        self.addCleanup(self.eager.close)
        config: Any = apps.get_app_config("shop")
        config.jobs = Jobs(self.eager.producer, self.eager.outbox(transaction.on_commit))
        self.addCleanup(setattr, config, "jobs", None)
        self.jobs: Jobs = config.jobs

    def test_a_committed_order_has_its_receipt_sent_at_commit(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            order = place_order(self.jobs, tenant="acme", email="a@example.com", amount_cents=1999)
            self.assertEqual(self.eager.runs, [])  # staged: nothing runs before the commit
        [run] = self.eager.ran(type="send_receipt", tenant="acme", payload={"order_id": order.pk})
        self.assertEqual(run.job_id, Order.objects.get(pk=order.pk).receipt_job)
        self.assertTrue(run.succeeded)

    def test_a_rolled_back_order_leaves_no_job(self) -> None:
        with (
            self.captureOnCommitCallbacks(execute=True),
            self.assertRaises(OrderError),
            transaction.atomic(),
        ):
            place_order(self.jobs, tenant="acme", email="a@example.com", amount_cents=1999)
            raise OrderError("the payment was declined")
        self.assertEqual(Order.objects.count(), 0)
        self.assertEqual(self.eager.runs, [])

    def test_an_order_whose_job_cannot_be_made_stages_nothing_and_rolls_back(self) -> None:
        with self.captureOnCommitCallbacks(execute=True), self.assertRaises(ValueError) as bad:
            place_order(self.jobs, tenant="", email="a@example.com", amount_cents=1999)
        self.assertIn("tenant_id must be a non-empty string", str(bad.exception))
        self.assertEqual(Order.objects.count(), 0)
        self.assertEqual(self.eager.runs, [])

    def test_resending_a_receipt_enqueues_it_at_once(self) -> None:
        order = Order.objects.create(tenant="acme", email="a@example.com", amount_cents=5)
        job_id = resend_receipt(self.jobs, order)  # no commit needed
        self.assertTrue(self.eager.run_of(job_id).succeeded)


class RunworkerTest(TestCase):
    def test_runworker_runs_the_shops_app_on_its_queue_with_the_workers_options(self) -> None:
        argv = worker_argv(["--concurrency", "4"])
        self.assertEqual(argv, ["run", APP, "--queue", "emails", "--concurrency", "4"])
        self.assertIs(load_app(APP), shop_jobs.app)
