"""Durable copies as values: what the engine decided must be written to Kafka.

The engine (on any thread) only describes a copy: a retry or hop to a delay
tier, a dead letter, a raw dead letter for an undecodable record, a dedupe
key's claim, or a job's status record; or a copy held until the Schema Registry
gives the job's envelope schema (``HELD``: ``copy_queue`` builds it again later).
The outbox, on the Kafka loop's thread, sends it and reports back.
Nothing here produces; everything here is plain data and pure functions, so the
shrinking of oversized copies is tested without Kafka.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import IntEnum, StrEnum
from typing import Any

from jobcore.control import DedupeClaim, JobStatus
from jobcore.progress import JobProgress
from leasekeeper.core.leases import TopicPart
from schemas.job import AttemptError, Job
from schemas.job_headers import JobHead
from schemas.vocabulary import DeadLetterReason

# Caps on one error in a job's history: a handler's message or traceback must not
# make the job's copies too large to produce.
MAX_MESSAGE_CHARS = 2000
MAX_TRACEBACK_CHARS = 4000
# A copy too large for its topic is dead-lettered with only this much history.
SHORT_HISTORY = 3
SHORT_TEXT_CHARS = 200


class CopyKind(StrEnum):
    RETRY = "retry"  # to the delay tier that fits the backoff
    HOP = "hop"  # a delay-tier record moving to the tier that fits the wait left
    PARK = "park"  # a job not dispatched now (breaker open), to a tier; no attempt spent
    DEAD = "dead"  # a job to the DLQ
    DEAD_RAW = "dead_raw"  # an undecodable record to the DLQ, byte for byte
    DEDUPE_CLAIM = "dedupe_claim"  # a dedupe key's first job, before the job runs
    STATUS = "status"  # how a job ended, to jobs.Q.status; resolves nothing
    # An acked job's return value, to jobs.Q.results (leasekeeper/core/results.py): its
    # delivery resolves the offset as acked and sends the job's status record.
    RESULT = "result"
    OVERFLOW = "overflow"  # a flooding tenant's job, to jobs.Q.overflow (overflow_lane)
    # Per-key ordering (leasekeeper/ordering/keys.py): an ordered job to the ordering lane
    # (held, retrying, or dead and blocking), back into its class topic, and its lane
    # record deleted once it is back.
    LANE = "lane"
    RETURN = "return"
    LANE_DROP = "lane_drop"
    # A copy that must rewrite a job read from its headers, while the registry cannot
    # give the envelope's schema: never sent; ``again`` builds it once the registry
    # answers (``CopyQueue`` tries with backoff). Its offset stays unresolved.
    HELD = "held"


class Shrink(IntEnum):
    """How much of a copy is kept; each step is tried after the last was too large."""

    FULL = 0
    SHORT_HISTORY = 1  # dead letter, history cut to the last few errors, texts cut
    NO_PAYLOAD = 2  # dead letter without the payload (raw: without value or key)


@dataclass(kw_only=True, slots=True, eq=False)
class CopyRequest:
    """One copy to make durable. The source offset resolves when it is delivered,
    unless the partition moved meanwhile (its generation no longer matches).

    Treated as immutable (``dataclasses.replace`` makes a changed one) but not frozen:
    a frozen dataclass sets each of its 20 fields through ``object.__setattr__``, which
    made building one cost more than the rest of its result's path (a result copy is
    one per job). Compared by identity: a copy is one decision, never looked up by
    value."""

    kind: CopyKind
    source: TopicPart
    offset: int
    generation: int
    job: Job | None = None
    tier: str = ""  # HOP (a retry's tier follows from delay_s)
    delay_s: float = 0.0  # RETRY, PARK
    reason: DeadLetterReason | None = None  # DEAD, DEAD_RAW
    detail: str = ""  # DEAD, DEAD_RAW; PARK: why
    raw_key: bytes | None = None  # DEAD_RAW; RESULT: the job id
    raw_value: bytes | None = None  # DEAD_RAW; OVERFLOW: the envelope, when unchanged; RESULT
    # OVERFLOW of a record read from its headers, unchanged: its head, and ``job`` is
    # None. Moving a flood aside must not decode every job of it (the copy's pace is
    # how soon the tenants behind the flood are reached): the fetched bytes and
    # headers made from the head go as they are.
    head: JobHead | None = None
    claim: DedupeClaim | None = None  # DEDUPE_CLAIM
    lease_id: str = ""  # DEDUPE_CLAIM: the job waiting for the claim
    status: JobStatus | None = None  # STATUS; RESULT: sent once the result is durable
    # RETRY, DEAD: the handler's run time in the attempt that failed, as its worker
    # reported it; a dead job's status record carries it once the letter is durable.
    run_s: float = 0.0
    # RETRY, DEAD of a nacked attempt: its last progress, for a dead job's status record.
    progress: JobProgress | None = None
    # LANE, RETURN, LANE_DROP: ordering's ``LaneEntry``, which the core only carries
    # (``leasekeeper.ordering.values.lane_entry`` reads it back). ``Any``, not
    # ``object``: a compiled dataclass looks its field types up by name in this module.
    lane: Any = None
    # LANE of a dead head that blocks its line: the dead letter, sent once the lane
    # record is durable (its delivery resolves the offset).
    then: CopyRequest | None = None
    # HELD: the decision made again (the same call), once the schema can be had.
    again: Callable[[], CopyRequest] | None = None

    @property
    def describe(self) -> str:
        """For logs and alerts: which copy of which record."""
        what = f"{self.kind.value} copy of {self.source.topic}/{self.source.partition}"
        named = self.job if self.job is not None else self.head
        job = f" (job {named.job_id})" if named is not None else ""
        return f"{what}/{self.offset}{job}"

    @property
    def tenant_id(self) -> str | None:
        """The copied job's tenant, from the job or from its head."""
        named = self.job if self.job is not None else self.head
        return named.tenant_id if named is not None else None


def cap_error(error: AttemptError) -> AttemptError:
    """An error entry small enough to carry: the message's head, the traceback's tail
    (where the raising frame is)."""
    return replace(
        error,
        message=_head(error.message, MAX_MESSAGE_CHARS),
        traceback=error.traceback[-MAX_TRACEBACK_CHARS:],
    )


def short_history(job: Job) -> Job:
    """The job with only its last few errors, each cut short: for a dead letter that
    did not fit with its whole history."""
    kept = tuple(
        replace(
            e,
            message=_head(e.message, SHORT_TEXT_CHARS),
            traceback=e.traceback[-SHORT_TEXT_CHARS:],
        )
        for e in job.errors[-SHORT_HISTORY:]
    )
    return replace(job, errors=kept)


def without_payload(job: Job) -> Job:
    """The job with id, type, tenant and (short) history but no payload."""
    return replace(short_history(job), payload=b"")


def _head(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
