"""Values that move through the leasekeeper: fetched jobs, leases, grants, settlements."""

from __future__ import annotations

import secrets
from typing import NamedTuple

from jobcore.progress import JobProgress
from leasekeeper.core.store_values import LeaseRecord
from schemas.job_headers import JobHead
from schemas.lease_answer import LeaseAnswer
from schemas.vocabulary import SettleKind

__all__ = [
    "Grant",
    "Lease",
    "Pending",
    "SettleKind",
    "Settlement",
    "TopicPart",
    "mint_token",
    "parse_lease_id",
    "restore_lease",
]


class TopicPart(NamedTuple):
    """A tuple, not a dataclass: it keys every per-partition dict, and a tuple's hash
    is computed in C where a dataclass's runs Python for each lookup."""

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


class Pending:
    """A fetched job waiting in the window for dispatch: its head (from the record's
    headers, or the decoded envelope), and the record's value, decoded only when the
    job must be rewritten. Slotted and not a dataclass: one is made per record, and
    nothing changes it after."""

    __slots__ = ("envelope", "generation", "job", "lease_id", "offset", "tp")

    tp: TopicPart
    offset: int
    generation: int
    job: JobHead
    envelope: bytes
    # Made once: the grant, the store and every settlement name the job by it.
    lease_id: str

    def __init__(
        self, tp: TopicPart, offset: int, generation: int, job: JobHead, envelope: bytes
    ) -> None:
        self.tp = tp
        self.offset = offset
        self.generation = generation
        self.job = job
        self.envelope = envelope
        self.lease_id = f"{tp.topic}/{tp.partition}/{offset}"

    def __repr__(self) -> str:
        return f"Pending({self.lease_id}, {self.job!r})"


class Lease:
    """A job handed to a worker; only the holder of ``token`` may settle it. Slotted,
    not a dataclass: one is made per claim."""

    __slots__ = (
        "attempt",
        "deadline",
        "lease_s",
        "pending",
        "progress",
        "started",
        "started_at",
        "started_ms",
        "token",
        "until_ms",
        "worker",
    )

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
    started: bool
    # How far the job has got, as its worker last said in a heartbeat (None: it said
    # nothing). Held with the lease, so it goes when the lease goes; an ack or a
    # nack that ends the job puts the last one in its status record.
    progress: JobProgress | None

    def __init__(
        self,
        *,
        pending: Pending,
        token: str,
        worker: str,
        attempt: int,
        lease_s: float,
        started_ms: int,
        until_ms: int,
        started_at: float,
        deadline: float,
        started: bool = True,
    ) -> None:
        self.pending = pending
        self.token = token
        self.worker = worker
        self.attempt = attempt
        self.lease_s = lease_s
        self.started_ms = started_ms
        self.until_ms = until_ms
        self.started_at = started_at
        self.deadline = deadline
        self.started = started
        self.progress = None

    def __repr__(self) -> str:
        return f"Lease({self.pending.lease_id}, worker={self.worker!r}, attempt={self.attempt})"


class Grant:
    """What a worker receives for one claimed job: the lease, the record's value (for
    workers that decode the envelope), and the head and payload (for those that read
    the job's fields from the claim and decode only the payload). One per claimed job."""

    __slots__ = ("attempt", "envelope", "job", "lease_id", "lease_s", "payload", "token",
                 "until_ms")  # fmt: skip

    lease_id: str
    token: str
    until_ms: int
    attempt: int
    lease_s: float
    envelope: bytes
    job: JobHead | None
    payload: bytes

    def __init__(
        self,
        *,
        lease_id: str,
        token: str,
        until_ms: int,
        attempt: int,
        lease_s: float,
        envelope: bytes,
        job: JobHead | None = None,
        payload: bytes = b"",
    ) -> None:
        self.lease_id = lease_id
        self.token = token
        self.until_ms = until_ms
        self.attempt = attempt
        self.lease_s = lease_s
        self.envelope = envelope
        self.job = job
        self.payload = payload


class Settlement:
    """One ack, nack or release as a worker sent it. Slotted, not a dataclass: one is
    made per settled job."""

    __slots__ = ("error_class", "lease_id", "message", "outcome", "permanent", "progress",
                 "result", "retry_after_s", "run_s", "token", "traceback")  # fmt: skip

    lease_id: str
    token: str
    outcome: SettleKind
    error_class: str
    message: str
    traceback: str
    retry_after_s: float
    permanent: bool
    # The handler's own run time (not claim-to-settle, which prefetch inflates): the
    # cost weighted fair queuing charges the job's tenant. 0 when not reported.
    run_s: float
    # An ack's encoded return value (``jobcore.results``); empty when it returned None.
    result: bytes
    # The handler's last progress, sent with the settlement in case no heartbeat took it.
    progress: JobProgress | None

    def __init__(
        self,
        *,
        lease_id: str,
        token: str,
        outcome: SettleKind,
        error_class: str = "",
        message: str = "",
        traceback: str = "",
        retry_after_s: float = 0.0,
        permanent: bool = False,
        run_s: float = 0.0,
        result: bytes = b"",
        progress: JobProgress | None = None,
    ) -> None:
        self.lease_id = lease_id
        self.token = token
        self.outcome = outcome
        self.error_class = error_class
        self.message = message
        self.traceback = traceback
        self.retry_after_s = retry_after_s
        self.permanent = permanent
        self.run_s = run_s
        self.result = result
        self.progress = progress

    def __repr__(self) -> str:
        return f"Settlement({self.lease_id}, {self.outcome.value})"


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


def mark_started(lease: Lease, now_ms: int, mono: float) -> None:
    """The worker's handler started: from here its timeout runs and a crash spends the
    attempt."""
    lease.started = True
    lease.started_ms = now_ms
    lease.started_at = mono


def refused(lease_id: str, reason: str) -> LeaseAnswer:
    return LeaseAnswer(lease_id=lease_id, ok=False, reason=reason)
