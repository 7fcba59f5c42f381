"""Prefetch against real Kafka and a real leasekeeper: started-only attempts.

A worker with ``--prefetch 2`` holds twice as many leases as it runs. Jobs that wait
in it are heartbeated, released on SIGTERM, and when the process dies they come back
with their attempt given back; jobs that had started spend theirs. A job that kills
its worker as soon as it starts still reaches the DLQ after max_attempts.
"""

from __future__ import annotations

import signal

import pytest

from tests.integration.test_failures import leases_of, started_by
from tests.system import System, wait_until

pytestmark = pytest.mark.kafka


def _leases_started(system: System, pid: int) -> list[bool]:
    return [bool(lease["started"]) for lease in leases_of(system, f"-{pid}")]


def test_kill_9_gives_back_the_attempts_of_prefetched_jobs_and_spends_the_started_ones(
    system: System,
) -> None:
    system.configure(lease_s=2.0)
    system.start(workers=0)
    victim = system.add_worker(
        system.leasekeeper, concurrency=2, extra=["--prefetch", "2", "--grace", "1"]
    )
    victim_pid = victim.process.pid
    assert victim_pid is not None
    ids = system.enqueue_tasks(4, sleep_ms=10_000)
    wait_until(
        lambda: sorted(_leases_started(system, victim_pid)) == [False, False, True, True],
        30,
        "two jobs running (reported started) and two prefetched in the victim",
        step=0.05,
    )
    # Several heartbeats later the prefetched jobs are still held: they count against
    # their lease from the claim on and are kept alive like running ones.
    wait_until(
        lambda: all(e["age_s"] > 3 for e in leases_of(system, f"-{victim_pid}")),
        30,
        "the victim's leases to outlive one lease length",
        step=0.1,
    )
    assert len(leases_of(system, f"-{victim_pid}")) == 4
    victim.kill()
    system.add_worker(system.leasekeeper, concurrency=4, extra=["--prefetch", "1"])
    wait_until(lambda: system.acks() >= set(ids), 60, "all 4 jobs acked", step=0.2)

    ran = started_by(system, victim_pid)
    assert len(ran) == 2
    attempts = {job: sorted(e.attempt for e in system.starts() if e.job_id == job) for job in ids}
    assert {job: attempts[job] for job in ran} == {job: [1, 2] for job in ran}
    waited = set(ids) - ran
    assert {job: attempts[job] for job in waited} == {job: [1] for job in waited}, (
        "never started, yet its attempt was spent"
    )
    snapshot = system.leasekeeper.snapshot()
    assert snapshot is not None
    assert snapshot["counters"]["refunded"] == 2


def test_a_poison_job_reaches_the_dlq_after_max_attempts_with_prefetch_2(system: System) -> None:
    """The handler kills its process at once, before any start report could leave it.
    Each (restarted, so idle) worker takes the job on an idle handler: it counts as
    started at claim, so every crash spends an attempt, as without prefetch (the
    bound on refunds of jobs that waited is tested on a fake clock)."""
    system.configure(lease_s=2.0)
    system.start(workers=1, concurrency=1, extra=["--prefetch", "2"])
    (job,) = system.enqueue_tasks(1, exit_attempts=99, max_attempts=3)

    def dead_lettered() -> bool:
        for worker in list(system.workers):  # a supervisor would restart dead workers
            assert worker.process is not None
            if worker.process.poll() is not None and not getattr(worker, "replaced", False):
                worker.replaced = True  # type: ignore[attr-defined]
                system.add_worker(system.leasekeeper, concurrency=1, extra=["--prefetch", "2"])
        return bool(system.dead_letters())

    wait_until(dead_lettered, 120, "the poison job in the DLQ", step=0.2)
    (letter,) = system.dead_letters()
    assert letter.reason == "attempts exhausted"
    dead = system.codec().decode(letter.envelope)
    assert dead.job_id == job
    assert [(e.attempt, e.error_class) for e in dead.errors] == [
        (1, "LeaseExpired"),
        (2, "LeaseExpired"),
        (3, "LeaseExpired"),
    ]
    starts = sorted(e.attempt for e in system.starts())
    assert starts == [1, 2, 3], "a crash gave an attempt back"
    snapshot = system.leasekeeper.snapshot()
    assert snapshot is not None
    assert snapshot["counters"]["refunded"] == 0


def test_sigterm_releases_prefetched_jobs_and_they_run_elsewhere_at_once(system: System) -> None:
    system.start(workers=0)  # lease stays 30 s: nothing here may wait for expiry
    leaving = system.add_worker(
        system.leasekeeper, concurrency=2, extra=["--prefetch", "2", "--grace", "20"]
    )
    leaving_pid = leaving.process.pid
    assert leaving_pid is not None
    ids = system.enqueue_tasks(4, sleep_ms=10_000)
    wait_until(
        lambda: sorted(_leases_started(system, leaving_pid)) == [False, False, True, True],
        30,
        "two jobs running and two prefetched in the leaving worker",
        step=0.05,
    )
    leaving.process.send_signal(signal.SIGTERM)
    system.add_worker(system.leasekeeper, concurrency=2, extra=["--prefetch", "1"])
    assert leaving.process.wait(30) == 0
    wait_until(lambda: system.acks() >= set(ids), 30, "every job acked", step=0.2)

    running = started_by(system, leaving_pid)
    assert len(running) == 2, "the leaving worker started a job it had been asked to release"
    elsewhere = [e for e in system.starts() if e.pid != leaving_pid]
    assert {e.job_id for e in elsewhere} == set(ids) - running
    finished_here = [e.at for e in system.ack_events() if e.pid == leaving_pid]
    assert len(finished_here) == 2, "the leaving worker did not finish its running jobs"
    # Released at SIGTERM, not after the 30 s lease: they started while the leaving
    # worker still ran its own 10 s jobs.
    assert max(e.at for e in elsewhere) < min(finished_here)
    attempts = {job: [e.attempt for e in system.starts() if e.job_id == job] for job in ids}
    assert all(runs == [1] for runs in attempts.values()), attempts
