"""Which waiting claimers wake when work arrives: one, not every one of them.

Each idle worker long-polls with one claim. Waking them all for every arrival made
the ones that found nothing fight for the lock and the GIL for no job. These tests
run real claim threads against an engine on the real clock. A claim long-polls for
30 s and the test waits 10 s for its answer: a claim that only finds its work
when its poll times out (a missed wake) fails the test instead of passing late.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import pytest

from leasekeeper.core.leases import Grant, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job
from schemas.job_headers import JobHead

TP = TopicPart("jobs.q", 0)
CLAIM_WAIT_S = 30.0
ANSWER_WAIT_S = 10.0

Result = tuple[str, list[Grant]]


def make_engine(path: Path) -> LeaseEngine:
    engine = LeaseEngine(store=LeaseStore(path), config=EngineConfig(lease_s=10))
    engine.partitions.assign(TP, 0)
    return engine


def job(i: int, job_type: str = "noop") -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t1", type=job_type, payload=b"",
               created_at_ms=0, max_attempts=3)  # fmt: skip


def claim_in_thread(
    engine: LeaseEngine,
    results: queue.Queue[Result],
    name: str,
    max_jobs: int,
    types: frozenset[str] = frozenset(),
) -> threading.Thread:
    def run() -> None:
        results.put((name, engine.workers.claim(name, max_jobs, CLAIM_WAIT_S, types)))

    thread = threading.Thread(target=run, name=f"claim-{name}", daemon=True)
    thread.start()
    return thread


def await_waiting(engine: LeaseEngine, claims: int) -> None:
    """Until ``claims`` claim threads wait in the engine (they start asynchronously)."""
    deadline = time.monotonic() + ANSWER_WAIT_S
    while engine.workers.claimers.waiting() != claims:
        assert time.monotonic() < deadline, (
            f"{engine.workers.claimers.waiting()} claims wait, not {claims}"
        )
        time.sleep(0.001)


@pytest.mark.parametrize("types", [frozenset(), frozenset({"noop", "mail"})], ids=["any", "typed"])
def test_one_arrival_wakes_one_of_three_waiting_claimers(
    tmp_path: Path, types: frozenset[str]
) -> None:
    """Workers name the types they run in every claim: those wake one at a time too."""
    engine = make_engine(tmp_path)
    results: queue.Queue[Result] = queue.Queue()
    for name in ("a", "b", "c"):
        claim_in_thread(engine, results, name, max_jobs=10, types=types)
    await_waiting(engine, 3)
    served: list[str] = []
    for offset in range(3):
        engine.fetch.offer(TP, offset, job(offset), b"x")
        name, grants = results.get(timeout=ANSWER_WAIT_S)
        assert [g.lease_id for g in grants] == [f"jobs.q/0/{offset}"]
        served.append(name)
    assert sorted(served) == ["a", "b", "c"]
    # Waking all would have woken 3, then the 2 left, then 1.
    assert engine.workers.claimers.wakeups == 3
    assert engine.workers.claimers.waiting() == 0


def two_claims_then_a_batch(
    engine: LeaseEngine, results: queue.Queue[Result], *, max_jobs: int, jobs: int
) -> None:
    """Two claims of any type wait; then ``jobs`` jobs arrive in one fetch."""
    claim_in_thread(engine, results, "a", max_jobs=max_jobs)
    claim_in_thread(engine, results, "b", max_jobs=max_jobs)
    await_waiting(engine, 2)
    engine.fetch.offer_many([(TP, i, JobHead.of(job(i)), b"x") for i in range(jobs)])


def test_what_a_full_claim_leaves_wakes_the_next_claimer(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    results: queue.Queue[Result] = queue.Queue()
    two_claims_then_a_batch(engine, results, max_jobs=4, jobs=6)
    sizes = sorted(len(results.get(timeout=ANSWER_WAIT_S)[1]) for _ in range(2))
    assert sizes == [2, 4]


def test_a_claimer_of_other_types_does_not_swallow_the_wake(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    results: queue.Queue[Result] = queue.Queue()
    claim_in_thread(engine, results, "reports-only", max_jobs=10, types=frozenset({"report"}))
    await_waiting(engine, 1)  # it waits longest: a single wake would be its
    claim_in_thread(engine, results, "mail-only", max_jobs=10, types=frozenset({"mail"}))
    await_waiting(engine, 2)
    engine.fetch.offer(TP, 0, job(0, "mail"), b"x")
    name, grants = results.get(timeout=ANSWER_WAIT_S)
    assert name == "mail-only" and [g.job.type for g in grants if g.job] == ["mail"]
    engine.fetch.offer(TP, 1, job(1, "report"), b"x")
    name, grants = results.get(timeout=ANSWER_WAIT_S)
    assert name == "reports-only" and [g.job.type for g in grants if g.job] == ["report"]


def test_a_batch_wakes_one_claimer_which_takes_it_all(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    results: queue.Queue[Result] = queue.Queue()
    two_claims_then_a_batch(engine, results, max_jobs=100, jobs=20)
    _, grants = results.get(timeout=ANSWER_WAIT_S)
    assert len(grants) == 20
    assert engine.workers.claimers.wakeups == 1
    assert engine.workers.claimers.waiting() == 1  # the other still waits, never woken
    engine.fetch.offer(TP, 20, job(20), b"x")  # the next arrival is its
    assert len(results.get(timeout=ANSWER_WAIT_S)[1]) == 1
