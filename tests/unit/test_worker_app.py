"""The handler registry."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from workers import App, JobContext
from workers.app import DuplicateHandler


def _ctx() -> JobContext:
    return JobContext(
        job_id="j1",
        attempt=1,
        tenant_id="t",
        queue="q",
        type="noop",
        created_at_ms=0,
        lease_id="jobs.q/0/1",
    )


def test_job_registers_sync_and_async_handlers_with_their_settings() -> None:
    app = App("billing")

    @app.job("send_receipt", timeout_s=5)
    def send(ctx: JobContext, payload: dict[str, Any]) -> str:
        return "sent"

    @app.job("resize_image")
    async def resize(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    sync, coro = app.handler_for("send_receipt"), app.handler_for("resize_image")
    assert sync is not None and coro is not None
    assert (sync.is_async, sync.timeout_s) == (False, 5)
    assert (coro.is_async, coro.timeout_s) == (True, None)
    assert sync.func is send, "the decorator returns the function unchanged"
    assert send(_ctx(), {}) == "sent"
    assert app.has_async_handlers
    assert sorted(app.handlers) == ["resize_image", "send_receipt"]
    assert app.handler_for("unknown") is None


def test_a_handler_takes_no_lease_length_the_leasekeeper_sets_it() -> None:
    """``lease_s`` was stored and never read: a lease length is set with
    ``leasekeeper serve --lease-for TYPE=S``, so the decorator no longer pretends."""
    with pytest.raises(TypeError, match="lease_s"):
        App().job("noop", lease_s=60)  # type: ignore[call-arg]


def test_a_second_handler_for_a_type_is_an_error() -> None:
    app = App()

    @app.job("noop")
    def first(ctx: JobContext, payload: dict[str, Any]) -> None:
        pass

    with pytest.raises(DuplicateHandler, match=r"'noop' already has a handler .*first"):

        @app.job("noop")
        def second(ctx: JobContext, payload: dict[str, Any]) -> None:
            pass


@pytest.mark.parametrize(
    ("job_type", "options"),
    [("", {}), ("noop", {"timeout_s": -1.0})],
)
def test_invalid_registrations_are_refused(job_type: str, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        App().job(job_type, **options)


def test_on_settled_hooks_run_in_order_and_a_failing_hook_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App()
    calls: list[tuple[str, str, bool]] = []

    @app.on_settled
    def broken(ctx: JobContext, outcome: str, accepted: bool) -> None:
        raise RuntimeError("hook bug")

    @app.on_settled
    def record(ctx: JobContext, outcome: str, accepted: bool) -> None:
        calls.append((ctx.job_id, outcome, accepted))

    with caplog.at_level(logging.ERROR):
        app.notify_settled(_ctx(), "ack", True)

    assert calls == [("j1", "ack", True)]
    assert "on_settled hook" in caplog.text


def test_lease_lost_is_recorded_once_with_its_first_reason() -> None:
    ctx = _ctx()
    assert not ctx.is_cancelled and ctx.lease_lost_reason is None
    assert ctx.mark_lease_lost("stale token")
    assert not ctx.mark_lease_lost("timed out")
    assert ctx.is_cancelled and ctx.lease_lost.is_set()
    assert ctx.lease_lost_reason == "stale token"
