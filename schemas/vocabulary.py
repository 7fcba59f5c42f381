"""The words workers and leasekeepers exchange and write into jobs, defined once.

Error classes name a failed attempt in a job's history (``AttemptError.error_class``);
the ones listed here are written by the system itself, any other is a handler's
exception class name. Dead-letter reasons say why the system moved a record to the
DLQ (``DeadLetter.reason``). Outcomes are what a worker reports for a lease. What an
ordering key does when one of its jobs dies is one choice for the leasekeeper's lines
and the outbox relay's rows alike (``OnDead``).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DeadLetterReason", "ErrorClass", "OnDead", "SettleKind"]


class ErrorClass(StrEnum):
    """Error classes the system writes (a handler's own exceptions keep their names)."""

    ERROR = "Error"  # a nack that named no class
    PERMANENT = "Permanent"  # the handler raised workers.Permanent
    PAYLOAD_DECODE_ERROR = "PayloadDecodeError"  # the payload does not match its schema
    UNKNOWN_JOB_TYPE = "UnknownJobType"  # no handler (worker) or no worker runs the type
    VALIDATION_ERROR = "ValidationError"
    JOB_TIMEOUT = "JobTimeout"  # ran past timeout_s
    LEASE_EXPIRED = "LeaseExpired"  # no ack or heartbeat within the lease
    # The handler raised workers.DependencyDown: its type's breaker opens at once.
    DEPENDENCY_DOWN = "DependencyDown"


class DeadLetterReason(StrEnum):
    """The reasons the system itself writes into ``DeadLetter.reason``."""

    UNDECODABLE = "undecodable"
    ATTEMPTS_EXHAUSTED = "attempts exhausted"
    PERMANENT_ERROR = "permanent error"
    TOO_LARGE = "too large"  # a retry or hop copy too large for its tier topic
    UNKNOWN_JOB_TYPE = "unknown job type"
    ORDERING_CONFLICT = "ordering class conflict"  # its key is in another class


class SettleKind(StrEnum):
    """How a worker settles a lease."""

    ACK = "ack"
    NACK = "nack"
    RELEASE = "release"  # not run: the attempt is given back


class OnDead(StrEnum):
    """What an ordering key does when one of its jobs dies: a leasekeeper's line whose
    head is dead-lettered (``leasekeeper serve --on-dead``), or the outbox relay's key
    whose row is set aside as dead (``producer outbox relay --on-dead``)."""

    CONTINUE = "continue"  # the key's next job runs (is relayed) without it
    BLOCK = "block"  # nothing more of the key until an operator replays, retries or drops it
