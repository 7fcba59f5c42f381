"""``App(middleware=[...])``: a middleware that times jobs and one that sets a context variable."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_worker_support import (
    Envelopes,
    FakeLeaseKeeper,
    running_worker,
    serving,
    wait_until,
)
from workers import App, JobContext, JobResult, Middleware, Outcome

current_tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_tenant", default=None
)


class Timing(Middleware):
    """Records each job's outcome and the handler's run time."""

    def __init__(self) -> None:
        self.timed: list[tuple[str, Outcome, float, str | None]] = []
        self.lifecycle: list[str] = []

    def on_worker_start(self, app: App) -> None:
        self.lifecycle.append(f"start {app.name}")

    def on_worker_stop(self, app: App) -> None:
        self.lifecycle.append(f"stop {app.name}")

    def after_job(self, ctx: JobContext, result: JobResult) -> None:
        error = result.error.error_class if result.error else None
        self.timed.append((ctx.job_id, result.outcome, result.duration_s, error))


class TenantContext(Middleware):
    """Sets ``current_tenant`` for the handler, and resets it afterwards."""

    def __init__(self) -> None:
        self._tokens: dict[str, contextvars.Token[str | None]] = {}

    def before_job(self, ctx: JobContext) -> None:
        self._tokens[ctx.job_id] = current_tenant.set(ctx.tenant_id)

    def after_job(self, ctx: JobContext, result: JobResult) -> None:
        current_tenant.reset(self._tokens.pop(ctx.job_id))


class Broken(Middleware):
    def before_job(self, ctx: JobContext) -> None:
        raise RuntimeError("a bug in a middleware")


def test_middleware_times_jobs_sets_a_context_variable_and_sees_start_and_stop(
    tmp_path: Path,
) -> None:
    timing, tenant = Timing(), TenantContext()
    app = App("mw", middleware=[timing, tenant, Broken()])
    seen: list[tuple[str, str | None]] = []

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
        seen.append(("sync", current_tenant.get()))
        if payload.get("n") == 2:
            raise ValueError("bad input")

    @app.job("send_receipt")
    async def receipt(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        seen.append(("async", current_tenant.get()))

    envelopes = Envelopes()
    payload = {"order_id": 7, "email": "a@example.com", "amount_cents": 1250}
    fake = FakeLeaseKeeper(
        [envelopes("noop", {"n": 1}), envelopes("noop", {"n": 2}),
         envelopes("send_receipt", payload)]
    )  # fmt: skip
    with serving(fake, tmp_path / "lk.sock") as target, running_worker(app, target):
        wait_until(lambda: len(fake.settled) == 3, what="3 settlements")
        wait_until(lambda: len(timing.timed) == 3, what="3 timed jobs")

    assert sorted(seen) == [("async", "tenant-a"), ("sync", "tenant-a"), ("sync", "tenant-a")]
    outcomes = sorted((job, outcome, error) for job, outcome, _, error in timing.timed)
    assert outcomes == [
        ("job-1", Outcome.SUCCEEDED, None),
        ("job-2", Outcome.FAILED, "ValueError"),
        ("job-3", Outcome.SUCCEEDED, None),
    ]
    assert all(duration >= 0 for _, _, duration, _ in timing.timed)
    assert timing.lifecycle == ["start mw", "stop mw"]
    assert current_tenant.get() is None


def test_after_job_gets_a_result_like_any_other_frozen_and_equal() -> None:
    """The chain makes its ``JobResult`` without the dataclass's ``__init__``: the
    hook still gets one equal to ``JobResult(...)``, and as frozen."""
    from workers.errors import Failure
    from workers.middleware import MiddlewareChain

    seen: list[JobResult] = []

    class Keep(Middleware):
        def after_job(self, ctx: JobContext, result: JobResult) -> None:
            seen.append(result)

    clock = iter([1.0, 1.25, 2.0, 2.5])
    chain = MiddlewareChain([Keep()], clock=lambda: next(clock))
    ctx = JobContext(job_id="j1", attempt=1, tenant_id="t", queue="q", type="noop",
                     created_at_ms=1, lease_id="l1")  # fmt: skip
    failure = Failure(error_class="ValueError", message="bad")
    assert chain.run_sync(ctx, lambda: None) is None
    assert chain.run_sync(ctx, lambda: failure) is failure
    assert seen == [
        JobResult(outcome=Outcome.SUCCEEDED, duration_s=0.25),
        JobResult(outcome=Outcome.FAILED, duration_s=0.5, error=failure),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].duration_s = 0.0  # type: ignore[misc]
