"""The worker channel against real Kafka: a leasekeeper restart keeps the acks it is owed."""

from __future__ import annotations

from tests.system import System, wait_until


def test_kill_9_of_the_leasekeeper_while_a_worker_holds_acks_runs_no_job_twice(
    system: System,
) -> None:
    # Without static membership the restarted leasekeeper serves RPCs for a whole
    # session timeout before the group gives it its partitions back: the worker's
    # held acks arrive in that window and must be answered "retry later".
    system.configure(lease_s=120.0, static=False)
    system.start(workers=1, concurrency=8)
    ids = system.enqueue_tasks(8, sleep_ms=3_000)
    wait_until(lambda: len(system.starts()) == len(ids), 60, "all 8 jobs to start")
    system.leasekeeper.kill()
    wait_until(lambda: len(system.runs()) == len(ids), 30, "the handlers to finish")

    system.restart_leasekeeper()
    wait_until(lambda: system.acks() == set(ids), 90, "the held acks to be accepted")
    system.wait_caught_up(60)
    assert system.refused() == []
    assert system.runs() == {job_id: 1 for job_id in ids}
    assert sorted(e.job_id for e in system.starts()) == sorted(ids)
