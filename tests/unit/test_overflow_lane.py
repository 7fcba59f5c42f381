"""The overflow lane's policy: when a tenant goes to overflow, follows, and comes back;
what survives a restart (the store) and a move (the commit metadata)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.offset_metadata import decode as decode_progress
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.overflow.policy import (
    MAX_TENANTS,
    SECTION,
    OverflowEntry,
    OverflowLane,
    split_metadata,
)
from schemas.job import Job

TP = TopicPart("jobs.q", 0)
SLICE = 20  # the partition's slice of the window: a tenant above 10 floods it


def job(i: int, tenant: str) -> Job:
    return Job(job_id=f"{tenant}-{i}", queue="q", tenant_id=tenant, type="noop", payload=b"",
               created_at_ms=i)  # fmt: skip


def engine_at(path: Path) -> LeaseEngine:
    """An engine with the lane on (it is off by default)."""
    config = EngineConfig(window_records=100, overflow_share=0.5)
    return LeaseEngine(store=LeaseStore(path), config=config)


def offer(engine: LeaseEngine, tenant: str, offsets: range, tp: TopicPart = TP) -> None:
    for offset in offsets:
        engine.fetch.offer(tp, offset, job(offset, tenant), f"{tenant}-{offset}".encode())


def moved(engine: LeaseEngine) -> list[CopyRequest]:
    return [c for c in engine.copies.take() if c.kind is CopyKind.OVERFLOW]


def deliver(engine: LeaseEngine, copies: list[CopyRequest], first: int = 0) -> None:
    for index, copy in enumerate(copies):
        engine.copies.delivered(copy, at=first + index)


def ready_ids(engine: LeaseEngine) -> list[str]:
    return [g.envelope.decode() for g in engine.workers.claim("w", 1000, 0)]


# -- the pure policy ----------------------------------------------------------------


def test_only_a_tenant_holding_more_than_its_share_of_the_slice_floods() -> None:
    lane = OverflowLane(share=0.5)
    assert lane.flooders(TP, {"big": 11, "small": 9}, SLICE) == ["big"]
    assert lane.flooders(TP, {"big": 10, "small": 10}, SLICE) == []
    assert OverflowLane(share=0).flooders(TP, {"big": 1_000}, SLICE) == []  # the lane is off


def test_with_a_tiny_slice_a_tenant_holding_all_of_it_floods() -> None:
    """A partition pauses holding its slice: were the flood limit at or above the slice
    (``MIN_FLOOD`` with a small window), no tenant would ever flood it."""
    lane = OverflowLane()
    assert lane.flooders(TP, {"big": 3}, 3) == ["big"]
    assert lane.flooders(TP, {"big": 1}, 1) == ["big"]
    assert lane.flooders(TP, {"big": 4}, 20) == []  # MIN_FLOOD still holds for a real slice


def test_of_two_tenants_splitting_a_tiny_slice_the_majority_floods() -> None:
    """A paused partition holding 2 jobs of one tenant and 1 of another (a slice of
    3): the one holding the majority floods, or the partition would stay paused."""
    lane = OverflowLane()
    assert lane.flooders(TP, {"a": 2, "b": 1}, 3) == ["a"]
    assert lane.flooders(TP, {"a": 1, "b": 1}, 3) == []  # no majority: no flood
    assert lane.flooders(TP, {"big": 11, "small": 9}, SLICE) == ["big"]  # as before


def test_a_tenant_already_in_overflow_does_not_enter_again() -> None:
    lane = OverflowLane()
    lane.enter(TP, "big")
    assert lane.flooders(TP, {"big": 50}, SLICE) == []
    assert lane.follows(TP, "big") and not lane.follows(TopicPart("jobs.q", 1), "big")


def test_the_entries_of_a_partition_are_bounded() -> None:
    lane = OverflowLane()
    for n in range(MAX_TENANTS):
        lane.enter(TP, f"t{n}")
    assert lane.flooders(TP, {"one-more": 50}, SLICE) == []


def test_a_tenant_comes_back_only_once_the_commit_passed_its_last_moved_job() -> None:
    lane = OverflowLane()
    lane.enter(TP, "big")
    lane.decided(TP, "big", 1)
    lane.decided(TP, "big", 1)
    lane.delivered(TP, "big", 7)
    lane.committed[TP.partition] = 8
    assert lane.clear_passed() == {}, "a copy is still on its way"
    lane.delivered(TP, "big", 9)
    assert lane.backlog() == {"big": 2}  # offsets 8 and 9 are not passed yet
    lane.committed[TP.partition] = 9
    assert lane.clear_passed() == {}, "its last moved job (9) has not run"
    lane.committed[TP.partition] = 10
    assert lane.clear_passed() == {TP: ["big"]}
    assert not lane.follows(TP, "big")


def test_the_metadata_section_round_trips_and_the_progress_ignores_it() -> None:
    lane = OverflowLane()
    lane.enter(TP, "big")
    lane.delivered(TP, "big", 41)
    text = "lq1:3:BQ:" + lane.section(TP)  # progress, then the section
    progress, entries = split_metadata(text)
    assert entries == {"big": OverflowEntry(first=41, last=41)}
    assert progress == "lq1:3:BQ:"
    assert decode_progress(0, SECTION + "garbage") == decode_progress(0, "")
    assert split_metadata(SECTION + "garbage") == ("", {})


# -- in the engine ------------------------------------------------------------------


def test_a_flooding_tenants_ready_jobs_move_in_order_and_the_others_stay(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    offer(engine, "small", range(30, 33))
    assert engine.overflow.floods({TP}, SLICE) == 30
    copies = moved(engine)
    assert [c.offset for c in copies] == list(range(30)), "moved in enqueue order"
    assert {c.job.tenant_id for c in copies if c.job} == {"big"}
    assert ready_ids(engine) == ["small-30", "small-31", "small-32"]


def test_a_tenant_in_overflow_has_its_newer_jobs_follow(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    engine.overflow.floods({TP}, SLICE)
    moved(engine)
    offer(engine, "big", range(30, 32))
    offer(engine, "small", range(32, 33))
    assert [c.offset for c in moved(engine)] == [30, 31]
    assert ready_ids(engine) == ["small-32"]


def test_moving_keeps_id_created_at_and_the_attempts_counted_on_the_offset(
    tmp_path: Path,
) -> None:
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0, None)
    state = engine._book.parts[TP]
    state.claims[3] = 2  # leased twice before (e.g. by the partition's previous owner)
    offer(engine, "big", range(0, 30))
    engine.overflow.floods({TP}, SLICE)
    copy = next(c for c in moved(engine) if c.offset == 3)
    assert copy.job is not None
    assert (copy.job.job_id, copy.job.created_at_ms, copy.job.attempt) == ("big-3", 3, 2)


def test_the_source_offset_resolves_only_once_the_copy_is_durable(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    engine.overflow.floods({TP}, SLICE)
    copies = moved(engine)
    assert engine.commits.commit_positions()[TP][0] == 0
    deliver(engine, copies[:10])
    assert engine.commits.commit_positions()[TP][0] == 10
    assert engine.partitions.in_flight({TP}) == 20


def test_a_tenant_back_from_overflow_goes_straight_to_the_window(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    engine.overflow.floods({TP}, SLICE)
    deliver(engine, moved(engine), first=100)  # overflow offsets 100..129
    assert engine.overflow.watched() == {0}
    engine.overflow.committed({0: 129})
    offer(engine, "big", range(30, 31))
    assert [c.offset for c in moved(engine)] == [30], "job 129 has not run: still follows"
    engine.copies.delivered(CopyRequest(kind=CopyKind.OVERFLOW, source=TP, offset=30,
                                      generation=1, job=job(30, "big")), at=130)  # fmt: skip
    engine.overflow.committed({0: 131})
    assert engine.overflow.watched() == set()
    offer(engine, "big", range(31, 32))
    assert moved(engine) == []
    assert ready_ids(engine) == ["big-31"]


def test_the_overflow_backlog_is_shown_per_tenant(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    engine.overflow.floods({TP}, SLICE)
    copies = moved(engine)
    deliver(engine, copies[:20], first=0)
    engine.overflow.committed({0: 5})
    views = {t.tenant: t for t in engine.views.fairness().tenants}
    assert views["big"].overflow == 15 + 10  # 5..19 in the lane, 10 copies on their way


def test_the_entry_survives_a_restart_in_place(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    engine.overflow.floods({TP}, SLICE)
    deliver(engine, moved(engine)[:5])
    engine._store.close()  # killed: no commit, no revoke
    restarted = engine_at(tmp_path)
    restarted.partitions.assign(TP, 0)  # the commit never moved: no metadata
    offer(restarted, "big", range(0, 31))
    assert [c.offset for c in moved(restarted)] == list(range(5, 31)), "0-4 are resolved"


def test_the_entry_travels_with_the_commit_to_the_next_owner(tmp_path: Path) -> None:
    engine = engine_at(tmp_path / "a")
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    engine.overflow.floods({TP}, SLICE)
    deliver(engine, moved(engine)[:5])
    offset, metadata = engine.commits.commit_positions()[TP]
    assert (offset, split_metadata(metadata)[1]) == (5, {"big": OverflowEntry(first=0, last=4)})
    engine.commits.committed({TP: (offset, metadata)})
    engine.partitions.revoke(TP)
    assert engine._store.overflow(TP.topic, TP.partition) == "", "the store lets go on a move"
    other = engine_at(tmp_path / "b")
    other.partitions.assign(TP, offset, metadata)
    offer(other, "big", range(5, 31))
    offer(other, "small", range(31, 32))
    assert [c.offset for c in moved(other)] == list(range(5, 31))
    assert ready_ids(other) == ["small-31"]


def test_a_second_copy_of_a_job_in_the_lane_is_skipped(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    lane = TopicPart("jobs.q.overflow", 0)
    engine.overflow.set_topic(lane.topic)
    engine.partitions.assign(lane, 0)
    engine.fetch.offer(lane, 0, job(1, "big"), b"big-1")
    engine.fetch.offer(lane, 1, job(2, "big"), b"big-2")
    engine.fetch.offer(lane, 2, job(1, "big"), b"big-1 again")  # copied again after a crash
    assert ready_ids(engine) == ["big-1", "big-2"]
    assert engine.commits.commit_positions()[lane][0] == 0  # offsets 0 and 1 run; 2 is resolved
    assert engine.counters.skipped == 1


def test_copies_wait_for_a_commit_apart_from_finished_jobs(tmp_path: Path) -> None:
    """Copies to the lane never stop leasing for everyone (they are not finished jobs);
    a partition with too many of them in no accepted commit stops fetching instead."""
    engine = LeaseEngine(store=LeaseStore(tmp_path),
                         config=EngineConfig(window_records=100, max_uncommitted=4,
                                             overflow_share=0.5))  # fmt: skip
    engine.partitions.assign(TP, 0)
    offer(engine, "big", range(0, 30))
    offer(engine, "small", range(30, 31))
    engine.overflow.floods({TP}, SLICE)
    copies = moved(engine)
    assert engine.overflow.copying(limit=30, unsaved=100) == {TP}, "30 copies on their way"
    assert engine.overflow.copying(limit=1_000, unsaved=100) == set()
    deliver(engine, copies[:10])
    assert engine.overflow.copying(limit=1_000, unsaved=10) == {TP}, "10 copies in no commit"
    assert ready_ids(engine) == ["small-30"], "leasing goes on: copies are not finished jobs"
    engine.commits.committed(engine.commits.commit_positions())
    assert engine.overflow.copying(limit=1_000, unsaved=10) == set()


def test_a_job_with_an_ordering_key_never_moves_to_the_lane(tmp_path: Path) -> None:
    """Its key's line lives on its own partition: a copy in the lane would be a second
    line of the same key, free to run beside the first."""
    engine = engine_at(tmp_path)
    engine.partitions.assign(TP, 0)
    ordered = replace(job(0, "big"), job_id="big-ordered-0", ordering_key="k", ordering_seq=0)
    engine.fetch.offer(TP, 0, ordered, b"big-ordered-0")
    offer(engine, "big", range(1, 31))
    engine.overflow.floods({TP}, SLICE)
    assert [c.offset for c in moved(engine)] == list(range(1, 31)), "the ordered job stays"
    later = replace(job(31, "big"), job_id="big-ordered-31", ordering_key="k2", ordering_seq=31)
    engine.fetch.offer(TP, 31, later, b"big-ordered-31")
    offer(engine, "big", range(32, 33))
    assert [c.offset for c in moved(engine)] == [32], "newer unordered jobs follow, ordered not"
    assert sorted(ready_ids(engine)) == ["big-ordered-0", "big-ordered-31"]
