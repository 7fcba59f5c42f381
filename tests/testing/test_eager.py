"""Eager mode: jobs run inline at enqueue through the worker's execution path, with
the real producer's validation; no Kafka, no leasekeeper.

Each outcome's eager behaviour, as ``jobtesting.eager_mode`` documents it: success,
retries (``Retry``, ``Retry(after=)``, an exception) at once up to ``max_attempts``,
``Permanent``, a timeout, a job that never succeeds (raised, or recorded), a
delayed job, and ``async def`` handlers enqueued from a running event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobcore.job_state import JobState
from jobcore.kafka import KafkaSettings
from jobtesting import Eager, EagerJobDead, eager
from producer import JobProducer, JobRequest, PayloadError
from schemas.codec import SchemaRegistry
from tests.unit.test_import_rules import RUNTIME, imports_in
from workers import App, JobContext, Permanent, Retry
from workers.middleware import JobResult, Middleware

RECEIPT = {"order_id": 42, "email": "a@example.com", "amount_cents": 1999}


class Seen(Middleware):
    """What the worker's middleware hooks saw, and on which thread."""

    def __init__(self) -> None:
        self.before: list[tuple[str, int]] = []
        self.after: list[JobResult] = []
        self.threads: list[str] = []
        self.started = self.stopped = 0

    def on_worker_start(self, app: App) -> None:
        self.started += 1

    def on_worker_stop(self, app: App) -> None:
        self.stopped += 1

    def before_job(self, ctx: JobContext) -> None:
        self.before.append((ctx.type, ctx.attempt))
        self.threads.append(threading.current_thread().name)

    def after_job(self, ctx: JobContext, result: JobResult) -> None:
        self.after.append(result)


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def app(seen: Seen) -> App:
    return App("shop", middleware=[seen])


@pytest.fixture
def jobs(app: App) -> Iterator[Eager]:
    with eager(app, registry=SchemaRegistry(), raise_dead=False) as queue:
        yield queue


def enqueue(jobs: Eager, type: str = "send_receipt", **options: Any) -> str:
    payload = options.pop("payload", RECEIPT)
    return jobs.producer.enqueue("emails", type, payload, tenant_id="acme", **options)


def test_a_job_has_run_through_the_middleware_when_enqueue_returns(
    app: App, jobs: Eager, seen: Seen
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    @app.job("send_receipt")
    def send_receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
        calls.append((ctx.job_id, payload))

    job_id = enqueue(jobs)
    # Decoded by its schema, as a worker gets it: the schema's default filled in.
    assert calls == [(job_id, {**RECEIPT, "currency": "EUR"})]
    assert seen.before == [("send_receipt", 1)] and seen.after[0].error is None
    run = jobs.run_of(job_id)
    assert run.succeeded and len(run.attempts) == 1
    assert jobs.ran(type="send_receipt", tenant="acme", payload={"order_id": 42}) == [run]
    assert jobs.ran(tenant="globex") == []
    status = jobs.producer.status("emails", job_id)
    assert (status.state, status.source, status.attempt) == (JobState.SUCCEEDED, "eager mode", 1)
    assert jobs.producer.status("emails", "f" * 32).state is JobState.NOT_FOUND


def test_the_apps_worker_hooks_run_once_around_the_eager_producers_life(
    app: App, seen: Seen
) -> None:
    with eager(app, registry=SchemaRegistry()):
        assert (seen.started, seen.stopped) == (1, 0)
    assert (seen.started, seen.stopped) == (1, 1)


def _rejections() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        ("send_receipt", {"order_id": "forty-two", "email": "a@b"}, {}),
        ("no_such_type", {}, {}),
        ("send_receipt", RECEIPT, {"delay": 40 * 86400}),
        ("send_receipt", RECEIPT, {"run_at": datetime(2030, 1, 1)}),
        ("send_receipt", RECEIPT, {"ordering_key": "order-42", "delay": 5}),
        ("send_receipt", RECEIPT, {"priority": "urgent"}),
        ("send_receipt", RECEIPT, {"max_attempts": 0}),
    ]


@pytest.mark.parametrize(("job_type", "payload", "options"), _rejections())
def test_enqueue_refuses_what_the_real_producer_refuses_with_the_same_error(
    app: App, jobs: Eager, job_type: str, payload: dict[str, Any], options: dict[str, Any]
) -> None:
    @app.job(job_type)
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise AssertionError("a refused job must not run")

    # The real producer refuses before it needs the broker (none listens there).
    real = JobProducer(KafkaSettings(bootstrap="127.0.0.1:1"), registry=SchemaRegistry())
    with real, pytest.raises((PayloadError, ValueError)) as expected:
        real.enqueue("emails", job_type, payload, tenant_id="acme", **options)
    with pytest.raises(type(expected.value)) as got:
        enqueue(jobs, job_type, payload=payload, **options)
    assert str(got.value) == str(expected.value)
    assert jobs.runs == []


def test_retry_runs_the_next_attempts_at_once_until_one_succeeds(app: App, jobs: Eager) -> None:
    @app.job("send_receipt")
    def flaky(ctx: JobContext, payload: dict[str, Any]) -> None:
        if ctx.attempt == 1:
            raise Retry("rate limited", after=3600)  # not waited for
        if ctx.attempt == 2:
            raise Retry("later")
        if ctx.attempt == 3:
            raise ConnectionError("reset by peer")

    run = jobs.run_of(enqueue(jobs))
    assert run.succeeded
    assert [a.number for a in run.attempts] == [1, 2, 3, 4]
    errors = [a.error for a in run.attempts[:3]]
    assert [(e.error_class, e.retry_after_s) for e in errors if e] == [
        ("Retry", 3600.0),
        ("Retry", 0.0),
        ("ConnectionError", 0.0),
    ]
    assert run.attempts[3].error is None


def test_a_job_that_never_succeeds_raises_at_enqueue_once_its_attempts_are_spent(
    app: App,
) -> None:
    attempts: list[int] = []

    @app.job("send_receipt")
    def down(ctx: JobContext, payload: dict[str, Any]) -> None:
        attempts.append(ctx.attempt)
        raise Retry("partner down", after=60)

    with eager(app, registry=SchemaRegistry()) as jobs:
        with pytest.raises(
            EagerJobDead, match=r"dead after 3 attempts \(attempts exhausted\)"
        ) as dead:
            enqueue(jobs, max_attempts=3)
        assert attempts == [1, 2, 3]
        assert dead.value.run.state is JobState.DEAD
        assert jobs.runs == [dead.value.run]
        status = jobs.producer.status("emails", dead.value.run.job_id)
        assert (status.state, status.reason, status.attempt) == (
            JobState.DEAD,
            "attempts exhausted",
            3,
        )
        assert status.last_error == "Retry: partner down"


def test_raise_dead_false_records_the_dead_job_and_returns_its_id(app: App, jobs: Eager) -> None:
    @app.job("send_receipt")
    def broken(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise KeyError("missing template")

    run = jobs.run_of(enqueue(jobs, max_attempts=2))
    assert (run.state, run.reason, len(run.attempts)) == (JobState.DEAD, "attempts exhausted", 2)
    assert run.last_error == "KeyError: 'missing template'"


def test_permanent_is_dead_after_one_attempt(app: App, jobs: Eager, seen: Seen) -> None:
    @app.job("send_receipt")
    def bad_address(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise Permanent(f"not an address: {payload['email']}")

    run = jobs.run_of(enqueue(jobs, payload={**RECEIPT, "email": "nobody"}))
    assert (run.state, run.reason, len(run.attempts)) == (JobState.DEAD, "permanent error", 1)
    assert run.last_error == "Permanent: not an address: nobody"
    assert len(seen.after) == 1


def test_a_type_without_a_handler_in_the_app_is_dead_as_an_unknown_type(jobs: Eager) -> None:
    run = jobs.run_of(
        enqueue(jobs, "password_reset", payload={"user_id": "u1", "email": "a@example.com"})
    )
    assert (run.state, run.reason) == (JobState.DEAD, "unknown job type")
    assert "no handler for job type 'password_reset' in app 'shop'" in (run.last_error or "")


def test_a_sync_handler_past_its_timeout_loses_its_lease_and_the_attempt_times_out(
    app: App, jobs: Eager
) -> None:
    reasons: list[str | None] = []

    @app.job("send_receipt", timeout_s=0.05)
    def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        if ctx.attempt == 1:
            assert ctx.lease_lost.wait(30)  # stands in for a long step that polls it
            reasons.append(ctx.lease_lost_reason)

    run = jobs.run_of(enqueue(jobs))
    assert reasons == ["timed out after 0.05s"]
    assert run.attempts[0].timed_out and run.attempts[0].error is not None
    assert run.attempts[0].error.error_class == "JobTimeout"
    assert run.succeeded and len(run.attempts) == 2  # retried like any failure


def test_an_async_handler_past_its_timeout_is_cancelled_before_enqueue_returns(
    app: App, jobs: Eager
) -> None:
    unwound = threading.Event()

    @app.job("send_receipt", timeout_s=0.05)
    async def hangs(ctx: JobContext, payload: dict[str, Any]) -> None:
        try:
            await asyncio.Event().wait()  # never set
        finally:
            unwound.set()

    run = jobs.run_of(enqueue(jobs, max_attempts=1))
    assert unwound.is_set()
    assert (run.state, run.reason) == (JobState.DEAD, "attempts exhausted")
    assert run.attempts[0].timed_out


def test_a_delayed_job_runs_at_once_and_keeps_its_due_time(app: App, jobs: Eager) -> None:
    ran: list[str] = []

    @app.job("send_receipt")
    def send_receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
        ran.append(ctx.job_id)

    job_id = enqueue(jobs, delay=timedelta(hours=1))
    run = jobs.run_of(job_id)
    assert ran == [job_id] and run.succeeded
    assert run.due_ms == run.job.run_at_ms
    assert 3_600_000 <= run.due_ms - run.job.created_at_ms <= 3_600_001  # rounded up
    assert jobs.run_of(enqueue(jobs)).due_ms is None


def test_an_async_handler_enqueued_from_a_running_loop_has_finished_when_enqueue_returns(
    app: App, jobs: Eager
) -> None:
    where: list[tuple[str, asyncio.AbstractEventLoop]] = []

    @app.job("resize_image")
    async def resize(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        where.append((threading.current_thread().name, asyncio.get_running_loop()))

    async def endpoint() -> tuple[str, asyncio.AbstractEventLoop]:
        image = {"image_url": "s3://a.png", "width": 10, "height": 20}
        job_id = jobs.producer.enqueue("images", "resize_image", image, tenant_id="acme")
        assert len(where) == 1, "enqueue returned before the handler finished"
        assert jobs.run_of(job_id).succeeded
        return threading.current_thread().name, asyncio.get_running_loop()

    caller_thread, caller_loop = asyncio.run(endpoint())
    handler_thread, handler_loop = where[0]
    assert handler_thread != caller_thread and handler_loop is not caller_loop


def test_an_async_handler_may_enqueue_a_job_that_runs_inline_too(app: App, jobs: Eager) -> None:
    @app.job("send_receipt")
    async def receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
        jobs.producer.enqueue("emails", "noop", {"n": payload["order_id"]}, tenant_id="acme")

    @app.job("noop")
    async def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)

    enqueue(jobs)
    assert [(run.type, run.succeeded) for run in jobs.runs] == [
        ("noop", True),
        ("send_receipt", True),
    ]
    assert jobs.ran(type="noop")[0].payload == {"n": 42}


def test_settled_hooks_hear_each_attempt(app: App, jobs: Eager) -> None:
    heard: list[tuple[int, str, bool]] = []
    app.on_settled(lambda ctx, outcome, accepted: heard.append((ctx.attempt, outcome, accepted)))

    @app.job("send_receipt")
    def once_flaky(ctx: JobContext, payload: dict[str, Any]) -> None:
        if ctx.attempt == 1:
            raise TimeoutError("smtp")

    enqueue(jobs)
    assert heard == [(1, "nack", True), (2, "ack", True)]


def test_clear_forgets_the_runs_and_kafka_only_calls_say_they_need_kafka(
    app: App, jobs: Eager
) -> None:
    app.job("noop")(lambda ctx, payload: None)
    job_id = enqueue(jobs, "noop", payload={})
    jobs.clear()
    assert jobs.runs == []
    with pytest.raises(KeyError, match=job_id):
        jobs.run_of(job_id)
    with pytest.raises(RuntimeError, match=r"JobProducer.cancel needs Kafka.*EagerTransport"):
        jobs.producer.cancel("emails", job_id)


def test_a_producer_needs_kafka_settings_or_a_transport() -> None:
    with pytest.raises(TypeError, match="needs Kafka settings, or a transport"):
        JobProducer(None)


def test_no_runtime_package_imports_the_testing_package() -> None:
    uses = [
        str(i)
        for package in RUNTIME
        for i in imports_in(package)
        if i.module.split(".")[0] == "jobtesting"
    ]
    assert uses == []
    assert any(i.module.startswith("workers") for i in imports_in("jobtesting"))


def test_the_eager_outbox_validates_as_staging_does_and_runs_only_at_commit(
    app: App, jobs: Eager
) -> None:
    app.job("send_receipt")(lambda ctx, payload: None)
    commits: list[Callable[[], None]] = []
    outbox = jobs.outbox(commits.append)  # the framework's commit hook, held back here
    good = JobRequest(queue="emails", type="send_receipt", payload=RECEIPT, tenant_id="acme")
    bad = [good, JobRequest(queue="emails", type="send_receipt", payload={}, tenant_id="acme")]
    with pytest.raises(PayloadError, match=r"^request 1: send_receipt payload"):
        outbox.stage_many(None, bad)
    assert commits == []
    job_id = outbox.stage(None, good)
    assert jobs.runs == []  # not before the commit; a rollback would drop the hook
    commits.pop()()
    assert [run.job_id for run in jobs.runs] == [job_id]
