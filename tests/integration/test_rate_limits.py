"""Rate limits against the real broker (issue 18, part 2): a limited type is dispatched at
no more than its rate, its backlog is parked rather than failed, and another type on the
same partition is not starved meanwhile. Rates are upper bounds; no wall time is asserted."""

from __future__ import annotations

from tests.system import System, wait_until

RATE = 20  # noop jobs per second, over the whole queue
BACKLOG = 400  # 20 s of noop jobs at the limit
TASKS = 40


def noop_rate(starts: list[float]) -> float:
    """Dispatches per second from the first start to the last."""
    starts = sorted(starts)
    return (len(starts) - 1) / (starts[-1] - starts[0])


def busiest_window(starts: list[float], seconds: float) -> int:
    """The most starts in any ``seconds`` long window."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] > seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_a_limited_type_keeps_its_rate_waits_unfailed_and_others_go_on(system: System) -> None:
    # A small window: without parking, the noop backlog would fill it and pause the
    # partition the other type's jobs share with it.
    system.configure(lease_s=30, extra=["--rate-limit", f"noop={RATE}/s",
                                        "--window-records", "200"])  # fmt: skip
    system.start(workers=2, concurrency=16)
    noops = set(system.enqueue(BACKLOG, tenants=2))
    wait_until(lambda: len(system.starts()) >= 2 * RATE, 60, "the noop backlog to be running")

    def started(ids: set[str]) -> set[str]:
        return {e.job_id for e in system.starts()} & ids

    noops_before = len(started(noops))
    # On noop tenant-0's partition, behind about 100 noop jobs the window has no room for.
    tasks = set(system.enqueue_tasks(TASKS, tenant="tenant-0"))
    wait_until(lambda: started(tasks) == tasks, 60, "every task job to start")
    noops_meanwhile = len(started(noops)) - noops_before
    # Parked, the backlog leaves the window and the partition's fetch free: the tasks
    # start within a few seconds' worth of noop dispatches. Held in the window, the
    # tasks would wait until most of the noop jobs ahead of them had run.
    assert noops_meanwhile < 3 * RATE, f"{noops_meanwhile} noop jobs started first"

    wait_until(lambda: system.acks() >= noops | tasks, 120, "every job to succeed")
    starts = [e for e in system.starts() if e.job_id in noops]
    assert {e.attempt for e in starts} == {1}, "the limiter spends no attempts"
    assert len(starts) == BACKLOG, "each noop job ran once"
    at = [e.at for e in starts]
    rate = noop_rate(at)
    print(f"noop dispatch rate {rate:.1f}/s over {max(at) - min(at):.1f}s at a limit of "
          f"{RATE}/s; {noops_meanwhile} noop starts while the {TASKS} tasks started")  # fmt: skip
    assert rate <= 1.2 * RATE
    # Any 5 s: the rate plus one second's burst, and a claim batch of slack.
    assert busiest_window(at, 5.0) <= 5 * RATE + RATE + 16
    snap = system.leasekeeper.snapshot()
    assert snap is not None
    (limiter,) = snap["limits"]["limiters"]
    assert limiter["key"] == "noop" and limiter["dispatched"] == BACKLOG
    assert limiter["parked"] > 0, "the backlog beyond its share of the window was parked"
    assert snap["counters"]["dead"] == 0 and snap["counters"]["retried"] == 0
    assert system.dead_letters() == []
