"""``MemoryQueue``: what was enqueued, and what a drain through the real leasekeeper
core and worker path makes of it, on the fake clock (no Kafka, no Java)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from jobcore.results import results_partition
from jobtesting import DrainLimit, End, FakeClock, MemoryQueue
from producer import JobProducer, PayloadError
from producer.scheduler import CronEntry
from workers import App, JobContext, Permanent, Retry

RECEIPT = {"order_id": 42, "email": "a@example.com", "amount_cents": 1999}


def _receipt(producer: JobProducer, order_id: int = 42, **options: Any) -> str:
    return producer.enqueue("emails", "send_receipt", {**RECEIPT, "order_id": order_id},
                            tenant_id=options.pop("tenant_id", "acme"), **options)  # fmt: skip


def test_enqueued_jobs_are_listed_decoded_in_order(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    first = _receipt(job_producer, 1)
    second = _receipt(job_producer, 2, tenant_id="globex", delay=60)
    jobs = job_queue.enqueued("emails")
    assert [job.job_id for job in jobs] == [first, second]
    assert job_queue.payload_of(jobs[1]) == {**RECEIPT, "order_id": 2, "currency": "EUR"}
    found = job_queue.assert_enqueued(type="send_receipt", tenant="globex", payload={"order_id": 2})
    assert [job.job_id for job in found] == [second]
    with pytest.raises(PayloadError, match="order_id"):  # the real schema check
        job_producer.enqueue("emails", "send_receipt", {"email": "x"}, tenant_id="acme")
    job_queue.clear()
    assert job_queue.enqueued() == []


def test_assert_enqueued_says_what_was_enqueued_instead(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    job_id = _receipt(job_producer)
    with pytest.raises(AssertionError) as failure:
        job_queue.assert_enqueued(type="send_receipt", tenant="initech")
    message = str(failure.value)
    assert "expected 1 job(s) matching type='send_receipt', tenant='initech', found 0" in message
    assert "emails: send_receipt tenant='acme'" in message and job_id in message
    assert "'order_id': 42" in message


def test_a_job_failing_twice_then_succeeding_is_retried_on_the_fake_clock(
    job_queue: MemoryQueue, job_producer: JobProducer, fake_clock: FakeClock
) -> None:
    app = App()
    started: list[tuple[int, float]] = []

    @app.job("send_receipt")
    def send(ctx: JobContext, payload: dict[str, Any]) -> None:
        started.append((ctx.attempt, fake_clock.time()))
        if ctx.attempt < 3:
            raise ConnectionError(f"mail server down ({ctx.attempt})")

    job_id = _receipt(job_producer)
    report = job_queue.drain(app)
    run = report.job(job_id)
    assert (run.state, run.attempts) == (End.SUCCEEDED, 3)
    assert [(e.attempt, e.error_class, e.message) for e in run.errors] == [
        (1, "ConnectionError", "mail server down (1)"),
        (2, "ConnectionError", "mail server down (2)"),
    ]
    assert [attempt for attempt, _ in started] == [1, 2, 3]
    # The leasekeeper's backoff was waited out on the fake clock, not slept.
    assert started[1][1] > started[0][1] and started[2][1] > started[1][1]


def test_a_permanent_failure_goes_to_the_dead_letter_topic(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    app = App()

    @app.job("send_receipt")
    def send(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise Permanent(f"not an address: {payload['email']}")

    job_id = _receipt(job_producer)
    run = job_queue.drain(app, "emails").job(job_id)
    assert (run.state, run.attempts, run.reason) == (End.DEAD, 1, "permanent error")
    assert [(e.error_class, e.permanent) for e in run.errors] == [("Permanent", True)]
    dead = job_queue.cluster.records("jobs.emails.dlq")
    assert len(dead) == 1 and job_id.encode() in (dead[0].value or b"")


def test_a_delayed_job_runs_when_it_is_due(
    job_queue: MemoryQueue, job_producer: JobProducer, fake_clock: FakeClock
) -> None:
    app = App()
    ran_at: list[float] = []
    app.job("send_receipt")(lambda ctx, payload: ran_at.append(fake_clock.time()))
    enqueued_at = fake_clock.time()
    job_id = _receipt(job_producer, delay=3600)
    assert job_queue.drain(app, advance_clock=False).job(job_id).state is End.PENDING
    assert ran_at == [] and fake_clock.time() == enqueued_at
    assert job_queue.drain(app).job(job_id).state is End.SUCCEEDED
    assert len(ran_at) == 1 and ran_at[0] >= enqueued_at + 3600


def test_a_delayed_job_cancelled_before_it_is_due_never_runs(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    app = App()
    ran: list[str] = []
    app.job("send_receipt")(lambda ctx, payload: ran.append(ctx.job_id))
    cancelled = _receipt(job_producer, 1, delay=600)
    kept = _receipt(job_producer, 2, delay=600)
    job_queue.cancel(cancelled, reason="order refunded")
    report = job_queue.drain(app)
    assert report.job(cancelled).state is End.CANCELLED
    assert report.job(kept).state is End.SUCCEEDED
    assert ran == [kept]


def test_a_used_dedupe_key_skips_the_later_job_and_a_type_no_handler_runs_waits(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    app = App()
    app.job("send_receipt")(lambda ctx, payload: None)
    first = _receipt(job_producer, 1, dedupe_key="order-1")
    again = _receipt(job_producer, 1, dedupe_key="order-1")
    other = job_producer.enqueue("emails", "noop", {"n": 1}, tenant_id="acme")
    report = job_queue.drain(app)
    assert [(run.job_id, run.state) for run in report] == [
        (first, End.SUCCEEDED),
        (again, End.SKIPPED),
        (other, End.PENDING),
    ]


def test_retry_after_is_waited_on_the_fake_clock(
    job_queue: MemoryQueue, job_producer: JobProducer, fake_clock: FakeClock
) -> None:
    app = App()
    started: list[float] = []

    @app.job("send_receipt")
    def send(ctx: JobContext, payload: dict[str, Any]) -> None:
        started.append(fake_clock.time())
        if ctx.attempt == 1:
            raise Retry("rate limited", after=300)

    job_id = _receipt(job_producer)
    run = job_queue.drain(app, "emails").job(job_id)
    assert (run.state, run.attempts) == (End.SUCCEEDED, 2)
    assert run.errors[0].retry_after_s == 300
    assert started[1] - started[0] >= 300


def test_a_handler_that_overruns_its_timeout_is_told_and_reported_not_killed(
    job_queue: MemoryQueue, job_producer: JobProducer, fake_clock: FakeClock
) -> None:
    app = App()
    seen: list[bool] = []

    @app.job("send_receipt", timeout_s=10)
    def send(ctx: JobContext, payload: dict[str, Any]) -> None:
        if ctx.attempt == 1:
            fake_clock.advance(25)  # stands in for a slow call
            seen.append(ctx.lease_lost.is_set())

    job_id = _receipt(job_producer)
    run = job_queue.drain(app).job(job_id)
    assert seen == [True]
    assert (run.state, run.attempts) == (End.SUCCEEDED, 2)
    timeout = run.errors[0]
    assert (timeout.error_class, timeout.timed_out, timeout.ran_past_timeout_s) == (
        "JobTimeout",
        True,
        15,
    )


def test_an_async_handler_that_overruns_its_timeout_is_cancelled(
    job_queue: MemoryQueue, job_producer: JobProducer, fake_clock: FakeClock
) -> None:
    app = App()
    finished: list[int] = []

    @app.job("send_receipt", timeout_s=5)
    async def send(ctx: JobContext, payload: dict[str, Any]) -> None:
        if ctx.attempt == 1:
            fake_clock.advance(6)
            await asyncio.Event().wait()  # would never return: only a cancel ends it
        finished.append(ctx.attempt)

    job_id = _receipt(job_producer)
    run = job_queue.drain(app).job(job_id)
    assert [(e.attempt, e.error_class, e.timed_out) for e in run.errors] == [
        (1, "JobTimeout", True)
    ]
    assert (run.state, finished) == (End.SUCCEEDED, [2])


def test_async_handlers_run_even_from_a_running_event_loop(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    app = App()
    ran: list[int] = []

    @app.job("send_receipt")
    async def send(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        ran.append(payload["order_id"])

    _receipt(job_producer, 7)

    async def from_a_web_app() -> None:
        assert [run.state for run in job_queue.drain(app)] == [End.SUCCEEDED]

    asyncio.run(from_a_web_app())
    assert ran == [7]


def test_a_drain_that_would_never_end_stops_with_the_bound_named(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    app = App()

    @app.job("send_receipt")
    def again(ctx: JobContext, payload: dict[str, Any]) -> None:
        _receipt(job_producer, payload["order_id"] + 1)

    _receipt(job_producer)
    with pytest.raises(DrainLimit, match="max_steps=50"):
        job_queue.drain(app, max_steps=50)


def test_a_queue_restores_the_kafka_clients_it_replaced() -> None:
    from jobcore.client_hook import installed_clients

    before = installed_clients()
    with MemoryQueue() as queue:
        assert installed_clients() is queue.cluster
    assert installed_clients() is before
    with pytest.raises(RuntimeError, match="closed"):
        queue.producer()


def test_cron_entries_fire_on_the_fake_clock_within_the_horizon(
    job_queue: MemoryQueue, fake_clock: FakeClock
) -> None:
    app = App()
    fired_at: list[float] = []
    app.job("noop")(lambda ctx, payload: fired_at.append(fake_clock.time()))
    start = fake_clock.time()
    job_queue.schedule(CronEntry(name="hourly", schedule="0 * * * *", queue="ops",
                                 type="noop", tenant="ops", payload={"n": 1}))  # fmt: skip
    with pytest.raises(ValueError, match="within="):
        job_queue.drain(app, "ops")
    report = job_queue.drain(app, "ops", within=timedelta(hours=3))
    assert [run.state for run in report] == [End.SUCCEEDED] * 3
    assert [at % 3600 for at in fired_at] == [0, 0, 0]  # on the hour, each
    assert fake_clock.time() == start + 3 * 3600
    job_queue.assert_enqueued(type="noop", tenant="ops", payload={"n": 1}, count=3)


def test_a_handler_s_return_value_goes_through_the_results_path_and_the_job_succeeds(
    job_queue: MemoryQueue, job_producer: JobProducer
) -> None:
    app = App()

    @app.job("send_receipt")
    def send(ctx: JobContext, payload: dict[str, Any]) -> dict[str, str]:
        return {"sent_to": payload["email"]}

    job_id = _receipt(job_producer)
    assert job_queue.drain(app).job(job_id).state == End.SUCCEEDED
    log = job_queue.cluster.log("jobs.emails.results", results_partition(job_id))
    assert log is not None
    (record,) = log.read(log.low, 10)
    assert (record.key, record.value) == (job_id.encode(), b'{"sent_to":"a@example.com"}')
