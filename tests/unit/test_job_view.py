"""``inspect job`` answers from what one leasekeeper knows, honestly.

Delayed tier records, dedupe-skipped jobs and cancelled ones are found by id
(whole, or a unique prefix of 8+ characters) after they left the window, and
across a restart on the same store; a cancellation for a job this leasekeeper
never held is reported as recorded, not as done.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from jobcore.control import Cancellation, DedupeClaim
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job
from schemas.job_headers import JobHead

TP = TopicPart("jobs.q", 0)
TIER = TopicPart("jobs.q.retry.1m", 0)
NOW_S = 1_800_000_000.0


def clock() -> float:
    return NOW_S


def make_engine(path: Path, store: LeaseStore | None = None) -> LeaseEngine:
    return LeaseEngine(
        store=store or LeaseStore(path),
        config=EngineConfig(lease_s=10),
        clock=clock,
        monotonic=clock,
    )


def new_id() -> str:
    return uuid.uuid4().hex


def job(job_id: str, key: str | None = None, run_at_ms: int = 0) -> Job:
    return Job(job_id=job_id, queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, dedupe_key=key, run_at_ms=run_at_ms)  # fmt: skip


def test_a_dedupe_skipped_job_names_the_original_even_after_a_restart(tmp_path: Path) -> None:
    original, duplicate = new_id(), new_id()
    store = LeaseStore(tmp_path)
    engine = make_engine(tmp_path, store)
    seen = int(NOW_S * 1000)
    claim = DedupeClaim(tenant_id="t1", dedupe_key="k", job_id=original, seen_at_ms=seen)
    engine.control.remember(claim)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(duplicate, key="k"), b"x")
    view = engine.views.job_view(duplicate)
    assert (view["state"], view["duplicate_of"]) == ("skipped", original)
    store.close()  # the process dies
    restarted = make_engine(tmp_path)
    assert restarted.views.job_view(duplicate[:8])["duplicate_of"] == original


def test_a_delayed_tier_record_is_found_by_id_until_it_leaves_the_tier(tmp_path: Path) -> None:
    job_id = new_id()
    due = int(NOW_S * 1000) + 20_000
    engine = make_engine(tmp_path)
    engine.fetch.note_delayed(TIER, 7, JobHead.of(job(job_id, run_at_ms=due)))
    view = engine.views.job_view(job_id)
    assert (view["state"], view["due_ms"], view["topic"], view["offset"]) == (
        "delayed", due, TIER.topic, 7
    )  # fmt: skip
    engine.fetch.forget_delayed(job_id)
    assert engine.views.job_view(job_id)["state"] == "unknown"


def test_cancelled_while_waiting_and_while_running_are_told_apart(tmp_path: Path) -> None:
    waiting, running = new_id(), new_id()
    engine = make_engine(tmp_path)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(waiting), b"x")
    engine.fetch.offer(TP, 1, job(running), b"x")
    engine.control.cancel(Cancellation(job_id=waiting, cancelled_at_ms=5))
    (grant,) = engine.workers.claim("w", 2, wait_s=0)  # skips the cancelled one, leases the other
    engine.control.cancel(Cancellation(job_id=running, cancelled_at_ms=6))
    engine.workers.heartbeat([(grant.lease_id, grant.token)])
    view_waiting, view_running = engine.views.job_view(waiting), engine.views.job_view(running)
    assert view_waiting["state"] == view_running["state"] == "cancelled"
    assert "never ran" in str(view_waiting["how"])
    assert "lease ended" in str(view_running["how"])


def test_a_cancellation_for_a_job_never_held_is_only_recorded(tmp_path: Path) -> None:
    job_id = new_id()
    engine = make_engine(tmp_path)
    engine.control.cancel(Cancellation(job_id=job_id, cancelled_at_ms=5))
    view = engine.views.job_view(job_id)
    assert (view["state"], view["member_knows"]) == ("cancellation recorded", False)


def test_an_unknown_or_ambiguous_id_is_said_to_be_so(tmp_path: Path) -> None:
    engine = make_engine(tmp_path)
    engine.partitions.assign(TP, 0)
    first, second = "abcdef01" + new_id()[8:], "abcdef01" + new_id()[8:]
    engine.fetch.offer(TP, 0, job(first), b"x")
    engine.fetch.offer(TP, 1, job(second), b"x")
    assert engine.views.job_view(new_id())["state"] == "unknown"
    ambiguous = engine.views.job_view("abcdef01")
    assert ambiguous["state"] == "ambiguous"
    assert "matches 2 jobs" in str(ambiguous["problem"])
    assert engine.views.job_view(first[:12])["job_id"] == first
    assert engine.views.job_view(first[:12])["state"] == "ready"
    assert "too short" in str(engine.views.job_view("abc")["problem"])


class Clock:
    def __init__(self) -> None:
        self.now = NOW_S

    def __call__(self) -> float:
        return self.now


def test_notes_are_pruned_past_the_dedupe_window_and_overdue_delays_ignored(
    tmp_path: Path,
) -> None:
    moving = Clock()
    engine = LeaseEngine(
        store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10), clock=moving, monotonic=moving
    )
    original, duplicate, later = new_id(), new_id(), new_id()
    seen = int(NOW_S * 1000)
    engine.control.remember(
        DedupeClaim(tenant_id="t1", dedupe_key="k", job_id=original, seen_at_ms=seen)
    )
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(duplicate, key="k"), b"x")
    engine.fetch.note_delayed(TIER, 7, JobHead.of(job(later, run_at_ms=seen + 20_000)))
    assert engine.fetch.prune_notes() == 0  # nothing is old yet
    moving.now += 120  # the delayed job is long overdue: its note no longer answers
    assert engine.views.job_view(later)["state"] == "unknown"
    moving.now += 2 * 86_400  # past the dedupe window, and the hourly pass is due
    assert engine.fetch.prune_notes() == 2
    assert engine.views.job_view(duplicate)["state"] == "unknown"
