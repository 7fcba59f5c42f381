"""Per-class delay tiers against the real broker (issue 10, item 3): a critical retry
waits behind its own class's retries only. Order properties, never times."""

from __future__ import annotations

from collections.abc import Iterator

from producer.request import JobRequest
from tests.system import System, wait_until

BULK = 600
# Far fewer than the bulk jobs the window could not take: in a tier shared by every
# class the critical retry is fetched only once they have been, so about
# BULK - WINDOW of them start first.
WINDOW = 100
NEXT_BULK = 150


def bulk_backlog(system: System) -> Iterator[JobRequest]:
    """Bulk jobs due in 1.5 s: they wait in the 1s delay tier (held there until its
    head has waited the tier out, then taken into the window as they fit), and run
    slowly once due, so most of them are still in the tier partition behind the head."""
    for n in range(BULK):
        yield JobRequest(queue=system.queue, type="task", tenant_id="flood", priority="bulk",
                         payload={"n": n, "sleep_ms": 100}, delay=1.5)  # fmt: skip


def test_a_critical_retry_behind_a_bulk_backlog_in_the_tiers_starts_before_the_next_150(
    system: System,
) -> None:
    """The same tenant (so the same tier partition number) enqueues a bulk backlog that
    waits in the delay tiers; once it runs, a critical job that fails once and retries
    at once. Its retry goes to the critical class's own tier, not behind the bulk
    records still in the tier partition."""
    system.configure(lease_s=30, extra=["--window-records", str(WINDOW)])
    system.start(workers=1, concurrency=2)
    system.enqueue_requests(bulk_backlog(system))
    wait_until(lambda: len(system.starts()) >= 20, 60, "the bulk backlog to be running")
    urgent = JobRequest(queue=system.queue, type="task", tenant_id="flood", priority="critical",
                        payload={"n": 0, "fail_attempts": 1, "retry_after_ms": 1})  # fmt: skip
    (critical,) = system.enqueue_requests([urgent])

    def retried() -> bool:
        return any(e.job_id == critical and e.attempt == 2 for e in system.starts())

    wait_until(retried, 120, "the critical job's retry to start")
    order = [(e.job_id, e.attempt) for e in system.starts()]  # one worker: in start order
    failed_at = order.index((critical, 1))
    retried_at = order.index((critical, 2))
    bulk_between = retried_at - failed_at - 1
    assert bulk_between < NEXT_BULK, (bulk_between, failed_at, len(order))
