"""An ordered job with a dedupe key keeps its place in its key's line while its dedupe
claim is on its way (real engine and store; copies taken and delivered by the test
as the outbox would)."""

from __future__ import annotations

from pathlib import Path

from jobcore.control import DedupeClaim
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Grant, SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job

TP = TopicPart("jobs.q", 0)
NOW_S = 1_000_000.0


def ordered(i: int, dedupe: str | None = None) -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, ordering_key="user-42", dedupe_key=dedupe)  # fmt: skip


def make(tmp_path: Path) -> LeaseEngine:
    clock = lambda: NOW_S  # noqa: E731
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                         clock=clock, monotonic=clock)  # fmt: skip
    engine.partitions.assign(TP, 0)
    return engine


def claim(engine: LeaseEngine) -> list[str]:
    """A loop turn, then a claim: the lease ids granted."""
    engine.fetch.promote_due()
    return [g.lease_id for g in engine.workers.claim("w", 10, wait_s=0)]


def ack(engine: LeaseEngine, grant: Grant) -> None:
    item = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.ACK)
    assert engine.workers.settle([item])[0].ok


def dedupe_claim(engine: LeaseEngine) -> CopyRequest:
    (request,) = [r for r in engine.copies.take() if r.kind is CopyKind.DEDUPE_CLAIM]
    return request


def test_the_next_job_of_its_key_waits_until_the_claim_is_durable_and_the_job_has_run(
    tmp_path: Path,
) -> None:
    engine = make(tmp_path)
    engine.fetch.offer(TP, 0, ordered(0, dedupe="receipt-7"), b"x")
    engine.fetch.offer(TP, 1, ordered(1), b"x")
    assert claim(engine) == []  # job 0's claim is not durable; job 1 may not pass it
    engine.copies.delivered(dedupe_claim(engine))
    engine.fetch.promote_due()
    (first,) = engine.workers.claim("w", 10, wait_s=0)
    assert first.lease_id == "jobs.q/0/0"
    assert claim(engine) == []  # job 1 waits for job 0 to end
    ack(engine, first)
    assert claim(engine) == ["jobs.q/0/1"]


def test_a_job_found_a_duplicate_when_its_claim_lands_leaves_its_line(tmp_path: Path) -> None:
    engine = make(tmp_path)
    engine.fetch.offer(TP, 0, ordered(0, dedupe="receipt-7"), b"x")
    engine.fetch.offer(TP, 1, ordered(1), b"x")
    request = dedupe_claim(engine)
    # Another leasekeeper's earlier claim of the same key arrives from the dedupe topic.
    earlier = DedupeClaim(tenant_id="t1", dedupe_key="receipt-7", job_id="job-elsewhere",
                          seen_at_ms=int(NOW_S * 1000) - 5_000)  # fmt: skip
    engine.control.remember(earlier)
    engine.copies.delivered(request)
    assert claim(engine) == ["jobs.q/0/1"]  # job 0 was skipped; its key goes on
    assert engine.counters.deduplicated == 1
    assert engine.commits.commit_positions()[TP][0] == 1  # job 0 resolved, job 1 running


def test_a_claim_that_cannot_be_delivered_keeps_its_key_waiting(tmp_path: Path) -> None:
    engine = make(tmp_path)
    engine.fetch.offer(TP, 0, ordered(0, dedupe="receipt-7"), b"x")
    engine.fetch.offer(TP, 1, ordered(1), b"x")
    engine.fetch.offer(TP, 2, ordered(2, dedupe="receipt-8"), b"x")
    engine.fetch.offer(TP, 3, ordered(3), b"x")
    claims = [r for r in engine.copies.take() if r.kind is CopyKind.DEDUPE_CLAIM]
    assert [r.offset for r in claims] == [0, 2]
    for _ in range(5):  # the dedupe topic refuses them (an ACL): the outbox keeps trying
        assert claim(engine) == []
    assert engine.commits.commit_positions().get(TP, (0, ""))[0] == 0
    # Job 2's claim landing first does not let it (or job 3) pass job 0.
    engine.copies.delivered(claims[1])
    assert claim(engine) == []
    engine.copies.delivered(claims[0])
    assert claim(engine) == ["jobs.q/0/0"]
