"""The kill -9 case of per-key ordering, step by step against the real ``KeyBook``.

After a restart the new owner may copy jobs back from the lane while earlier jobs
of the same line still wait in the class partition (copies the old process made
back before it died). When such an earlier job then fails, the jobs right behind
it are held again; a hold must not be undone by the tombstone of the copy back
that is still on its way (the tombstone was meant for the old lane record, not
for the new one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.ordering.keys import KeyBook
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId, Verdict
from schemas.job import Job
from schemas.job_headers import JobHead

TP = TopicPart("jobs.q", 0)
LINE = LineId(topic=TP.topic, partition=TP.partition, tenant="t", key="k")
BACKOFF_MS = 1_000


def _job(seq: int) -> Job:
    return Job(job_id=f"j{seq}", queue="q", tenant_id="t", type="noop", payload=b"",
               created_at_ms=0, max_attempts=3, ordering_key="k", ordering_seq=seq)  # fmt: skip


def _held(seq: int) -> LaneEntry:
    return LaneEntry(line=LINE, seq=seq, job=_job(seq), state=LaneState.HELD)


@dataclass(kw_only=True)
class World:
    """The class partition beyond the commit, the lane, and copies in flight (FIFO,
    delivered when the test says so), around one ``KeyBook``."""

    book: KeyBook
    log: list[Job] = field(default_factory=list)
    fetched: int = 0
    lane: dict[int, LaneEntry] = field(default_factory=dict)
    drops: list[LaneEntry] = field(default_factory=list)
    ran: list[int] = field(default_factory=list)

    def fetch(self, now: int, upto: int | None = None) -> None:
        while self.fetched < (len(self.log) if upto is None else upto):
            offset = self.fetched
            pending = Pending(TP, offset, 1, JobHead.of(self.log[offset]), b"")
            self.fetched += 1
            verdict, entry = self.book.offer(pending, now)
            assert verdict is not Verdict.CONFLICT
            if verdict is Verdict.RETURNED:
                assert entry is not None
                self.drops.append(entry)
            elif verdict is Verdict.HOLD:
                assert entry is not None
                self.lane[entry.seq] = entry

    def copy_back(self, now: int) -> None:
        self.log.extend(entry.job for entry in self.book.returns(now, lambda _tp: self.fetched))

    def hold(self, now: int) -> None:
        for _pending, entry in self.book.holds(now):
            self.lane[entry.seq] = entry  # delivered at once (after any tombstone sent)

    def deliver_drops(self) -> None:
        for entry in self.drops:
            self.lane.pop(entry.seq, None)
            self.book.returned(entry)
        self.drops.clear()

    def release(self) -> list[Pending]:
        return self.book.release(lambda _tp: self.fetched)

    def run(self) -> None:
        for pending in self.release():
            self.ran.append(pending.job.ordering_seq)
            self.book.finished(pending)

    def drain(self, now: int) -> None:
        """No more faults: every job of the line must run."""
        for _ in range(100):
            now += BACKOFF_MS
            self.copy_back(now)
            self.fetch(now)
            self.deliver_drops()
            self.hold(now)
            self.run()


def test_a_hold_is_not_undone_by_the_tombstone_of_a_copy_back_under_way() -> None:
    world = World(book=KeyBook())
    # The lane as the old process left it: 20 and 30 held. Job 10 was copied back by
    # the old process just before it died; its lane record's tombstone is durable,
    # its copy lies in the class partition beyond the commit.
    world.lane = {20: _held(20), 30: _held(30)}
    world.log = [_job(10)]
    world.book.assign(TP, 0, world.lane.values())  # a copy may land after the end seen
    now = 0
    world.copy_back(now)  # 20 and 30 come back before 10 is seen
    world.fetch(now)  # 10, then the copies of 20 and 30 (their tombstones go out)
    (head,) = world.release()
    assert head.job.ordering_seq == 10
    # 10 fails: it waits in the lane, and 20 and 30 must wait behind it.
    entry = world.book.failed(head, replace(head.job.full or _job(10), attempt=1),
                              now + BACKOFF_MS, "boom")  # fmt: skip
    world.lane[entry.seq] = entry
    world.hold(now)
    world.deliver_drops()  # the tombstones of the copies back of 20 and 30 land now
    world.hold(now)
    world.drain(now)
    assert world.ran == [10, 20, 30], f"ran {world.ran}, lane {sorted(world.lane)}"
    assert not world.lane


def test_jobs_are_not_copied_back_before_the_partition_is_read_to_its_end() -> None:
    """The old process copied 20 back and died before its lane record's tombstone was
    durable: the lane and the class partition both have 20. The new owner must see
    the copy in the partition (a duplicate of the lane record: skipped) before it
    copies 20 back itself, or 20 would run twice, the second time after later jobs."""
    world = World(book=KeyBook())
    world.lane = {20: _held(20)}
    world.log = [_job(20), _job(30)]  # 30: enqueued later, read from the partition
    end = len(world.log)
    world.book.assign(TP, end, world.lane.values())
    world.copy_back(0)  # the first turn may come before the first fetch
    world.fetch(0, upto=end)
    world.deliver_drops()
    world.run()
    world.drain(0)
    assert world.ran == [20, 30]
