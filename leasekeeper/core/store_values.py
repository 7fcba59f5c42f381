"""The values the lease store keeps per job, and what it remembers of a partition.

Each job beyond its partition's commit has one value (``store.py`` says under which
key): ``R`` and a resolution code (an ack's lease token after it), ``C`` and the
claims made with no lease in flight, ``L`` (``W`` while the job waits in its
worker's prefetch) and the claims with the lease. ``remember`` reads one back into a
``PartitionMemory``. ``JobNote`` is a job remembered by id, for ``inspect job``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "JobNote",
    "LeaseRecord",
    "NoteKind",
    "PartitionMemory",
    "Resolution",
    "acked_value",
    "claims_value",
    "leased_value",
    "remember",
    "resolved_value",
]

_LEASED, _CLAIMED, _RESOLVED = b"L", b"C", b"R"
# Leased, and the job waits in its worker's prefetch: not started (``started_only``).
_WAITING = b"W"


class NoteKind(StrEnum):
    """Why the store remembers a job by id (see ``JobNote``)."""

    DELAYED = "delayed"
    SKIPPED_DUPLICATE = "skipped_duplicate"
    # Cancelled while it waited (never run), or while it ran (its lease ended).
    CANCELLED_WAITING = "cancelled_waiting"
    CANCELLED_RUNNING = "cancelled_running"


@dataclass(frozen=True, kw_only=True)
class JobNote:
    """A job the leasekeeper saw but does not hold in its window, by job id: a
    delay-tier record waiting for its due time, a job skipped as a duplicate, or
    a cancelled one (skipped while waiting, or its lease ended while running).

    Offsets index the partition state; ``inspect job ID`` needs the other way round,
    and a person asks by id. ``due_ms`` is the run time of a delayed job;
    ``duplicate_of`` the id of the job that claimed the dedupe key first.
    """

    job_id: str
    kind: NoteKind
    topic: str
    partition: int
    offset: int
    seen_ms: int
    due_ms: int | None = None
    duplicate_of: str | None = None

    def encode(self) -> bytes:
        return json.dumps(
            [
                self.kind.value,
                self.topic,
                self.partition,
                self.offset,
                self.seen_ms,
                self.due_ms,
                self.duplicate_of,
            ]
        ).encode()

    @classmethod
    def decode(cls, job_id: str, raw: bytes) -> JobNote:
        kind, topic, partition, offset, seen_ms, due_ms, duplicate_of = json.loads(raw)
        return cls(
            job_id=job_id,
            kind=NoteKind(kind),
            topic=topic,
            partition=partition,
            offset=offset,
            seen_ms=seen_ms,
            due_ms=due_ms,
            duplicate_of=duplicate_of,
        )


class Resolution(StrEnum):
    ACKED = "acked"
    RETRIED = "retried"
    HOPPED = "hopped"
    PARKED = "parked"
    DEAD = "dead"
    SKIPPED = "skipped"
    OVERFLOWED = "overflowed"  # copied to the overflow lane (see overflow_lane)


# A resolution as stored: ``R`` and one letter.
_RESOLVED_VALUE = {how: _RESOLVED + how.value[:1].encode() for how in Resolution}
_RESOLUTION_OF = {value[1:]: how for how, value in _RESOLVED_VALUE.items()}
assert len(_RESOLUTION_OF) == len(Resolution), "resolution codes must differ"
# An ack's resolution is followed by its lease token (older stores: no token).
_ACKED_VALUE = _RESOLVED_VALUE[Resolution.ACKED]


@dataclass(frozen=True, kw_only=True)
class LeaseRecord:
    """A lease as persisted: enough for a restarted leasekeeper to honour its token."""

    token: str
    worker: str
    attempt: int
    started_ms: int
    until_ms: int
    # False while the job waits in its worker's prefetch (see ``started_only``). A
    # record written before the flag existed is a started job: the conservative
    # reading, which spends the attempt.
    started: bool = True

    def encode(self) -> bytes:
        """The lease as a legacy ``l/`` value (JSON); see ``leased_value`` for today's."""
        return json.dumps(
            [self.token, self.worker, self.attempt, self.started_ms, self.until_ms]
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> LeaseRecord:
        """A legacy ``l/`` value."""
        token, worker, attempt, started_ms, until_ms = json.loads(raw)
        return cls(
            token=token, worker=worker, attempt=attempt, started_ms=started_ms, until_ms=until_ms
        )


def leased_value(
    claims: int,
    token: str,
    worker: str,
    attempt: int,
    started_ms: int,
    until_ms: int,
    started: bool = True,
) -> bytes:
    """A job's state while leased: its claims and the lease, in one value (the worker
    id last, since it is the only field that may hold the separator). The first
    letter says whether the job started: ``L`` yes, ``W`` waiting in a prefetch."""
    kind = _LEASED if started else _WAITING
    return b"%s%d|%s|%d|%d|%d|%s" % (kind, claims, token.encode(), attempt, started_ms,
                                      until_ms, worker.encode())  # fmt: skip


def _read_leased(raw: bytes) -> tuple[int, LeaseRecord]:
    claims, token, attempt, started_ms, until_ms, worker = raw[1:].split(b"|", 5)
    record = LeaseRecord(token=token.decode(), worker=worker.decode(), attempt=int(attempt),
                         started_ms=int(started_ms), until_ms=int(until_ms),
                         started=raw[:1] != _WAITING)  # fmt: skip
    return int(claims), record


@dataclass(frozen=True, kw_only=True)
class PartitionMemory:
    """What the store remembers of one partition beyond its committed offset."""

    resolved: dict[int, Resolution]
    claims: dict[int, int]
    leases: dict[int, LeaseRecord]
    # When no connected worker could take the job first (epoch ms): the grace
    # before it fails as an unknown job type counts from there, across restarts.
    unhandled: dict[int, int] = field(default_factory=dict)
    # Attempts given back to jobs whose lease expired before they started: the
    # bound that keeps a job that kills its worker from being refunded forever.
    refunds: dict[int, int] = field(default_factory=dict)
    # The lease token of each acked offset (``StoreBatch.acked``).
    acked_tokens: dict[int, str] = field(default_factory=dict)


def resolved_value(how: Resolution) -> bytes:
    return _RESOLVED_VALUE[how]


def acked_value(token: str) -> bytes:
    """Resolved by an ack, with its lease token (see ``StoreBatch.acked``)."""
    return _ACKED_VALUE + token.encode()


def claims_value(count: int) -> bytes:
    return b"C%d" % count


def remember(
    value: bytes,
    offset: int,
    resolved: dict[int, Resolution],
    claims: dict[int, int],
    leases: dict[int, LeaseRecord],
    acked_tokens: dict[int, str],
) -> None:
    """One job's stored state into the partition's memory."""
    kind = value[:1]
    if kind == _RESOLVED:
        resolved[offset] = _RESOLUTION_OF[value[1:2]]
        if len(value) > 2 and value.startswith(_ACKED_VALUE):
            acked_tokens[offset] = value[2:].decode()
    elif kind == _CLAIMED:
        claims[offset] = int(value[1:])
    elif kind in (_LEASED, _WAITING):
        claims[offset], leases[offset] = _read_leased(value)
