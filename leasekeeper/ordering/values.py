"""The values of per-key ordering: a line's name, a lane record, what becomes of a
fetched ordered job, and how a job's place in its line is read (see ``ordering``).

Kept apart from ``KeyBook`` so that the book holds only the lines' logic, and so that
what carries these values (copies, the lane, the views) imports them, not the book.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from jobcore.plain import FLATTEN
from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.leases import Pending, TopicPart
from schemas.job import Job
from schemas.vocabulary import OnDead

__all__ = [
    "BlockedLine",
    "LaneEntry",
    "LaneState",
    "LineId",
    "OnDead",
    "Verdict",
    "lane_key",
    "line_of",
    "seq_of",
]


class LaneState(StrEnum):
    HELD = "held"  # waits behind its line's head
    RETRYING = "retrying"  # the head, failed, backing off until due_ms
    DEAD = "dead"  # the head, dead-lettered, blocking its line (--on-dead block)


class Verdict(StrEnum):
    """What becomes of an ordered job fetched from its class partition."""

    QUEUED = "queued"  # in its line; released to the window when it is the head
    RETURNED = "returned"  # a held job back from the lane: delete its lane record now
    HOLD = "hold"  # behind a blocked head: copy it to the lane
    DUPLICATE = "duplicate"  # its seq is in the lane already: resolve it as skipped
    CONFLICT = "conflict"  # its key is in another class here: dead-letter it


@dataclass(frozen=True, slots=True, kw_only=True)
class LineId:
    """One ordering key's line: its class partition, tenant and key."""

    topic: str
    partition: int
    tenant: str
    key: str

    @property
    def tp(self) -> TopicPart:
        return TopicPart(self.topic, self.partition)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaneEntry:
    """One job of a line outside its class topic: a record of the ordering lane."""

    line: LineId
    seq: int
    # None once the lane record is durable and the owner keeps places only: the job
    # is read back from the lane by its offset when it goes home (``LaneFeed.job_of``).
    job: Job | None
    state: LaneState
    due_ms: int = 0  # RETRYING, HELD: not brought back before
    reason: str = ""  # why it is out (for inspect)
    stored_id: str = ""  # the job's id once ``job`` is left in the lane

    @property
    def job_id(self) -> str:
        return self.job.job_id if self.job is not None else self.stored_id

    def without_job(self) -> LaneEntry:
        """The same entry keeping the job's id only (its lane record has the rest)."""
        return replace(self, job=None, stored_id=self.job_id)

    @property
    def record_key(self) -> str:
        return lane_key(self.line.tp, self.seq)

    def blocks(self, now_ms: int) -> bool:
        """Whether the jobs behind it must leave the partition (held) rather than wait."""
        return self.state is LaneState.DEAD or self.due_ms > now_ms


def lane_entry(request: CopyRequest) -> LaneEntry | None:
    """The lane entry a LANE, RETURN or LANE_DROP copy carries (None for other copies)."""
    entry = request.lane
    if entry is None:
        return None
    assert isinstance(entry, LaneEntry), f"{request.describe}: carries {type(entry).__name__}"
    return entry


def lane_key(tp: TopicPart, seq: int) -> str:
    return f"{tp.topic}|{tp.partition}|{seq}"


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockedLine:
    """A line whose head is out, for ``inspect`` and the metrics."""

    line: LineId = field(metadata=FLATTEN)  # shown as its topic, partition, tenant, key
    head_seq: int
    job_id: str
    state: LaneState
    due_ms: int
    reason: str
    held: int  # jobs of the line in the lane behind the head


def line_of(pending: Pending) -> LineId | None:
    key = pending.job.ordering_key
    if key is None:
        return None
    tp = pending.tp
    return LineId(topic=tp.topic, partition=tp.partition, tenant=pending.job.tenant_id, key=key)


def seq_of(pending: Pending) -> int:
    """The job's place in its line: stamped when it first left the class partition,
    else its offset there."""
    seq = pending.job.ordering_seq
    return seq if seq >= 0 else pending.offset
