"""A class partition assigned with a backlog deeper than its span beyond an ordered job.

Its lines wait until the fetch reaches the end offset seen at assignment; the jobs
fetched meanwhile held the commit, the loop paused the partition ``max_span`` past
it, and the fetch never reached that end: the whole partition stopped for good.
Here the engine runs against a model of one Kafka partition and of the outbox (every
copy is delivered on the turn it is made; a copy back lands at the partition's end),
with the loop's rule: fetch only while the partition is not over its span."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from leasekeeper.core.copies import CopyKind
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId
from schemas.job import Job

TP = TopicPart("jobs.q", 0)
SPAN = 10  # stands for MAX_SPAN (16,000)
KEY = "user-42"


def job(name: str, key: str | None = None, seq: int = -1) -> Job:
    return Job(job_id=name, queue="q", tenant_id="t1", type="noop", payload=b"",
               created_at_ms=0, ordering_key=key, ordering_seq=seq)  # fmt: skip


@dataclass(kw_only=True)
class Partition:
    """One class partition from ``start`` on, its engine, and what ran, in order."""

    engine: LeaseEngine
    log: dict[int, Job]
    fetched: int
    end: int
    started: list[str] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)

    def fetch(self) -> None:
        """What the loop fetches: nothing while the partition is over its span."""
        while TP not in self.engine.commits.over_span() and self.fetched < self.end:
            self.engine.fetch.offer(TP, self.fetched, self.log[self.fetched], b"x")
            self.fetched += 1

    def turn(self) -> None:
        """One loop turn: the fetch, the ordering turn, the outbox, workers that claim
        and ack everything, a commit."""
        engine = self.engine
        self.fetch()
        engine.fetch.promote_due()
        for request in engine.copies.take():
            if request.kind is CopyKind.RETURN:
                assert request.lane is not None
                self.log[self.end] = request.lane.job  # lands at the partition's end
                self.end += 1
            engine.copies.delivered(request)
        grants = engine.workers.claim("w", 100, wait_s=0)
        self.started += [g.job.job_id for g in grants if g.job is not None]
        acks = [Settlement(lease_id=g.lease_id, token=g.token, outcome=SettleKind.ACK)
                for g in grants]  # fmt: skip
        engine.workers.settle(acks)
        positions = engine.commits.commit_positions()
        if positions:
            engine.commits.committed(positions)
            self.commits.append(positions[TP][0])

    def run(self, turns: int = 200) -> None:
        for _ in range(turns):
            self.turn()


def assigned(tmp_path: Path, log: dict[int, Job], start: int,
             lane: list[LaneEntry] | None = None) -> Partition:  # fmt: skip
    """A leasekeeper assigned the partition at ``start``, its end then past ``log``."""
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(max_span=SPAN))
    engine.partitions.assign(TP, start)
    end = max(log) + 1
    engine.ordering.assign_lines(TP, end, lane or [])
    return Partition(engine=engine, log=log, fetched=start, end=end)


def test_an_ordered_job_at_the_head_of_a_backlog_deeper_than_the_span_runs(
    tmp_path: Path,
) -> None:
    """Today's stall: job 0 waits for the fetch to reach offset 100, holding the commit
    at 0, and the partition pauses at offset 9."""
    log = {i: job(f"j{i}", KEY if i in (0, 5) else None) for i in range(100)}
    part = assigned(tmp_path, log, 0)
    part.fetch()
    assert TP in part.engine.commits.over_span() and part.fetched == SPAN  # paused, far from 100
    part.run()
    assert "j0" in part.started
    assert part.commits and max(part.commits) > 0  # the commit moves
    assert [j for j in part.started if j in ("j0", "j5")] == ["j0", "j5"]
    assert sorted(part.started) == sorted(f"j{i}" for i in range(100))  # all ran, once
    assert part.commits[-1] == part.end  # and the partition is committed to its end


def test_a_job_copied_back_beyond_the_span_runs_before_the_later_jobs_of_its_key(
    tmp_path: Path,
) -> None:
    """A previous owner copied job ``b`` (seq 2) back from the lane to offset 50 and
    deleted its lane record, then died before it ran: ``c`` (offset 3, after ``b`` in
    the key's line) is fetched first, 47 offsets before ``b``. Releasing the lines when
    paused at the span would run ``c`` first; ``b`` must run first."""
    log = {i: job(f"j{i}") for i in range(3, 100)}
    log[3] = job("c", KEY)
    log[50] = job("b", KEY, seq=2)
    log[60] = job("d", KEY)
    enqueued = sorted(j.job_id for j in log.values())
    part = assigned(tmp_path, log, 3)
    part.run()
    assert [j for j in part.started if j in ("b", "c", "d")] == ["b", "c", "d"]
    assert sorted(part.started) == enqueued  # each once


def test_a_line_out_in_the_lane_when_assigned_keeps_its_order_past_the_span(
    tmp_path: Path,
) -> None:
    """The lane holds the key's head (seq 1, retried and due) when the partition is
    assigned: the key's later jobs, held while the partition settles, come back behind
    it and run after it, each once."""
    line = LineId(topic=TP.topic, partition=TP.partition, tenant="t1", key=KEY)
    head = LaneEntry(line=line, seq=1, job=job("a", KEY, seq=1), state=LaneState.RETRYING)
    log = {i: job(f"j{i}") for i in range(2, 100)}
    log[2], log[40] = job("b", KEY), job("c", KEY)
    enqueued = sorted(["a", *(j.job_id for j in log.values())])
    part = assigned(tmp_path, log, 2, [head])
    part.run()
    assert [j for j in part.started if j in ("a", "b", "c")] == ["a", "b", "c"]
    assert sorted(part.started) == enqueued  # each once
