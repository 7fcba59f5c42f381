"""Per-job costs of the worker's hot path: what a job that runs and is acked creates."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import pytest

from workers import context
from workers.context import JobContext
from workers.decoding import _new_context
from workers.handler_threads import HandlerThreads


def _ctx() -> JobContext:
    return JobContext(
        job_id="j1",
        attempt=1,
        tenant_id="t",
        queue="q",
        type="noop",
        created_at_ms=1,
        lease_id="l1",
    )


class CountingEvent(threading.Event):
    made = 0

    def __init__(self) -> None:
        super().__init__()
        CountingEvent.made += 1


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[CountingEvent]:
    CountingEvent.made = 0
    monkeypatch.setattr(context.threading, "Event", CountingEvent)
    return CountingEvent


def test_a_context_whose_handler_never_asks_for_lease_lost_makes_no_event(
    counting: type[CountingEvent],
) -> None:
    ctx = _ctx()
    assert not ctx.is_cancelled
    assert ctx.mark_lease_lost("timed out after 1s")
    assert ctx.is_cancelled and ctx.lease_lost_reason == "timed out after 1s"
    assert counting.made == 0


def test_lease_lost_asked_for_before_the_loss_is_set_by_it(
    counting: type[CountingEvent],
) -> None:
    ctx = _ctx()
    event = ctx.lease_lost
    assert not event.is_set()
    assert ctx.mark_lease_lost("stale token")
    assert event.is_set() and ctx.lease_lost is event
    assert not ctx.mark_lease_lost("again")  # recorded once
    assert ctx.lease_lost_reason == "stale token" and counting.made == 1


def test_lease_lost_asked_for_after_the_loss_is_already_set() -> None:
    ctx = _ctx()
    ctx.mark_lease_lost("grace period ran out")
    assert ctx.lease_lost.is_set()
    assert ctx.lease_lost.wait(0)


def test_the_runtime_s_context_is_the_one_the_dataclass_makes() -> None:
    """The decoder builds contexts without the dataclass's ``__init__``: same fields,
    same defaults, equal, frozen, and a loss of its own."""
    fast = _new_context(job_id="j1", attempt=1, tenant_id="t", queue="q", type="noop",
                        created_at_ms=1, lease_id="l1")  # fmt: skip
    assert fast == _ctx() and repr(fast) == repr(_ctx())
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(JobContext)}
    assert fast.trace == {} and fast.max_attempts == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.job_id = "other"  # type: ignore[misc]
    other = _new_context(job_id="j2", attempt=2, tenant_id="t", queue="q", type="noop",
                         created_at_ms=1, lease_id="l2", max_attempts=5,
                         trace={"traceparent": "00-x"})  # fmt: skip
    assert fast.mark_lease_lost("stale token") and not other.is_cancelled
    assert dataclasses.replace(other, attempt=3).attempt == 3
    assert other.trace == {"traceparent": "00-x"} and other.max_attempts == 5


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def test_handler_threads_run_a_submitted_batch_concurrently() -> None:
    """Each item of a batch goes to a free thread: a batch of I/O jobs is not run in line."""
    both = threading.Barrier(2, timeout=10)
    ran: list[int] = []

    def run(n: int) -> None:
        both.wait()  # only returns when the two items run at the same time
        ran.append(n)

    threads: HandlerThreads[int] = HandlerThreads(2, run, name="t")
    threads.start()
    threads.submit([1, 2])
    _wait(lambda: len(ran) == 2, "both items")
    threads.shutdown(wait=True)
    assert sorted(ran) == [1, 2]


def test_a_batch_of_blocking_items_spreads_over_every_thread() -> None:
    """One wake-up is under way at a time, and each woken thread wakes the next while
    items wait: eight items that block until all eight run together reach all eight
    threads (a chain that stopped early would leave the barrier short)."""
    together = threading.Barrier(8, timeout=10)
    ran: list[int] = []

    def run(n: int) -> None:
        together.wait()
        ran.append(n)

    threads: HandlerThreads[int] = HandlerThreads(8, run, name="t")
    threads.start()
    _wait(lambda: len(threads._parked) == 8, "every thread to park")
    threads.submit(range(8))
    _wait(lambda: len(ran) == 8, "all eight items")
    threads.shutdown(wait=True)
    assert sorted(ran) == list(range(8))


def test_a_failing_item_does_not_cost_the_pool_its_thread() -> None:
    ran: list[int] = []

    def run(n: int) -> None:
        if n == 0:
            raise SystemExit("a bug in the runtime")
        ran.append(n)

    threads: HandlerThreads[int] = HandlerThreads(1, run, name="t")
    threads.start()
    threads.submit([0, 1])
    _wait(lambda: ran == [1], "the item after the failure")
    threads.shutdown(wait=True)


def test_shutdown_drops_items_that_have_not_started() -> None:
    gate = threading.Event()
    ran: list[int] = []

    def run(n: int) -> None:
        gate.wait(10)
        ran.append(n)

    threads: HandlerThreads[int] = HandlerThreads(1, run, name="t")
    threads.start()
    threads.submit([1])
    _wait(lambda: threads.waiting == 0, "the first item to start")
    threads.submit([2, 3])
    threads.shutdown(wait=False)  # while 1 still runs: 2 and 3 are dropped
    gate.set()
    _wait(lambda: not any(t.is_alive() for t in threads._threads), "the thread to stop")
    assert ran == [1]
    with pytest.raises(RuntimeError, match="shut down"):
        threads.submit([4])


def test_an_item_submitted_first_runs_before_the_items_waiting_and_wakes_an_idle_thread() -> None:
    gate = threading.Event()
    ran: list[int] = []

    def run(n: int) -> None:
        ran.append(n)
        if n == 0:
            gate.wait(10)

    threads: HandlerThreads[int] = HandlerThreads(1, run, name="t")
    threads.start()
    threads.submit([0, 1, 2])
    _wait(lambda: ran == [0], "the first item runs")
    threads.submit([4], first=[3])
    gate.set()
    _wait(lambda: len(ran) == 5, "every item")
    assert ran == [0, 3, 1, 2, 4]
    threads.submit([], first=[5])  # the thread is idle, blocked on the main queue
    _wait(lambda: ran[-1:] == [5], "the item submitted first to an idle pool")
    threads.shutdown(wait=True)
