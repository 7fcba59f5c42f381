"""Values that move through the leasekeeper: fetched jobs, leases, grants, settlements."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from leasekeeper.store import LeaseRecord
from schemas.job import Job
from schemas.vocabulary import Outcome

__all__ = [
    "Grant",
    "Lease",
    "LeaseAnswer",
    "Outcome",
    "Pending",
    "Settlement",
    "TopicPart",
    "lease_record",
    "mint_token",
    "parse_lease_id",
    "restore_lease",
]


@dataclass(frozen=True, slots=True)
class TopicPart:
    topic: str
    partition: int

    def lease_id(self, offset: int) -> str:
        return f"{self.topic}/{self.partition}/{offset}"


def parse_lease_id(lease_id: str) -> tuple[TopicPart, int]:
    """``topic/partition/offset`` back into its parts; ValueError when malformed."""
    topic, partition, offset = lease_id.rsplit("/", 2)
    return TopicPart(topic, int(partition)), int(offset)


def mint_token() -> str:
    """A fresh lease token per claim: the fence that rejects zombie workers."""
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """A fetched, decoded job waiting in the window for dispatch."""

    tp: TopicPart
    offset: int
    generation: int
    job: Job
    envelope: bytes

    @property
    def lease_id(self) -> str:
        return self.tp.lease_id(self.offset)


@dataclass(slots=True, kw_only=True)
class Lease:
    """A job handed to a worker; only the holder of ``token`` may settle it."""

    pending: Pending
    token: str
    worker: str
    attempt: int
    lease_s: float
    started_ms: int  # epoch: for the wire, the store and display
    until_ms: int
    # Monotonic seconds: what the reaper compares, so a wall-clock step (NTP, a
    # suspended VM) cannot expire every lease at once.
    started_at: float
    deadline: float
    # False while the job waits in a worker's prefetch: until its worker reports the
    # handler started, ``started_at`` is the claim and no timeout_s runs (see
    # ``started_only``).
    started: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """What a worker receives for one claimed job."""

    lease_id: str
    token: str
    until_ms: int
    attempt: int
    lease_s: float
    envelope: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Settlement:
    lease_id: str
    token: str
    outcome: Outcome
    error_class: str = ""
    message: str = ""
    traceback: str = ""
    retry_after_s: float = 0.0
    permanent: bool = False
    # The handler's own run time (not claim-to-settle, which prefetch inflates): the
    # cost weighted fair queuing charges the job's tenant. 0 when not reported.
    run_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseAnswer:
    """The answer to one heartbeat or settlement."""

    lease_id: str
    ok: bool
    reason: str = ""
    until_ms: int = 0
    # Not known yet (a restart still re-reading the partition): ask again.
    retry_later: bool = False


def restore_lease(
    pending: Pending, stored: LeaseRecord, *, lease_s: float, wall: float, mono: float
) -> Lease:
    """A lease from before a restart: the one place epoch times become deadlines
    (the monotonic clock does not survive the process). ``wall`` is epoch seconds now,
    ``mono`` monotonic seconds now."""
    return Lease(
        pending=pending,
        token=stored.token,
        worker=stored.worker,
        attempt=stored.attempt,
        lease_s=lease_s,
        started_ms=stored.started_ms,
        until_ms=stored.until_ms,
        started_at=mono - max(0.0, wall - stored.started_ms / 1000),
        deadline=mono + (stored.until_ms / 1000 - wall),
        started=stored.started,
    )


def lease_record(lease: Lease) -> LeaseRecord:
    """What the store keeps of a lease (epoch times: they survive a restart)."""
    return LeaseRecord(
        token=lease.token,
        worker=lease.worker,
        attempt=lease.attempt,
        started_ms=lease.started_ms,
        until_ms=lease.until_ms,
        started=lease.started,
    )
