"""A full window pauses only the partitions holding their share of it (issue 10, item 1)."""

from __future__ import annotations

from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.window import ReadyWindow
from leasekeeper.fairness.weighted import ready_policy
from schemas.job import Job
from schemas.job_headers import JobHead

FLOOD, QUIET, IDLE = TopicPart("jobs.q", 0), TopicPart("jobs.q", 1), TopicPart("jobs.q", 2)


def pending(tp: TopicPart, i: int) -> Pending:
    job = Job(job_id=f"{tp.partition}-{i}", queue="q", tenant_id=f"t{tp.partition}",
              type="noop", payload=b"", created_at_ms=0)  # fmt: skip
    return Pending(tp=tp, offset=i, generation=1, job=JobHead.of(job), envelope=b"x")


def window_of(records: int) -> ReadyWindow:
    return ReadyWindow(
        records=records, max_bytes=1 << 20, wake=lambda job_type: None, policy=ready_policy()
    )


def test_a_full_window_pauses_only_the_partition_over_its_share() -> None:
    window = window_of(90)
    for i in range(90):
        window.push(pending(FLOOD, i))
    assert window.room() == 0
    over, headroom = window.over_share({FLOOD, QUIET, IDLE})
    assert over == {FLOOD}
    assert headroom == 30, "the other two partitions may each fetch up to their share of 30"


def test_a_partition_reaching_its_share_is_paused_too_and_memory_stays_bounded() -> None:
    window = window_of(90)
    for i in range(90):
        window.push(pending(FLOOD, i))
    for i in range(30):
        window.queue(pending(QUIET, i), not_before_ms=10, now_ms=0)  # delayed jobs count too
    over, headroom = window.over_share({FLOOD, QUIET, IDLE})
    assert over == {FLOOD, QUIET} and headroom == 30
    window.push(pending(IDLE, 0))
    assert window.over_share({FLOOD, QUIET, IDLE})[1] == 29, "one fetch takes the smallest room"
    window.pop(lambda p: p.tp == IDLE)
    for i in range(30):
        window.push(pending(IDLE, i))
    over, headroom = window.over_share({FLOOD, QUIET, IDLE})
    assert over == {FLOOD, QUIET, IDLE} and headroom == 0
    assert window.ready_count + window.delayed_count <= 2 * window.records


def test_counts_follow_jobs_out_of_the_window() -> None:
    window = window_of(4)
    for i in range(2):
        window.push(pending(FLOOD, i))
        window.queue(pending(QUIET, i), not_before_ms=10, now_ms=0)
    assert window.pop(None) is not None
    window.drop(lambda p: p.tp == QUIET)
    window.remove_ready(lambda p: True)
    assert (window.held(FLOOD), window.held(QUIET)) == (0, 0)
    window.push_front(pending(IDLE, 0))
    assert window.held(IDLE) == 1
    assert window.over_share({FLOOD, IDLE}) == (set(), 1), "IDLE holds 1 of its share of 2"


def test_a_partition_paused_at_its_share_stays_paused_until_half_of_it_is_free() -> None:
    window = window_of(90)
    for i in range(90):
        window.push(pending(FLOOD, i))
    assert window.over_share({FLOOD, QUIET, IDLE})[0] == {FLOOD}
    # Workers take jobs: FLOOD falls under its share of 30 but holds more than half.
    while window.held(FLOOD) > 16:
        window.pop(lambda p: p.tp == FLOOD)
    over, headroom = window.over_share({FLOOD, QUIET, IDLE})
    assert over == {FLOOD}, "resumed one job under its share, it would fetch one and pause"
    assert headroom == 30, "and the others keep their whole room"
    window.pop(lambda p: p.tp == FLOOD)
    over, headroom = window.over_share({FLOOD, QUIET, IDLE})
    assert over == set() and headroom == 15, "at half its share it fetches again"
