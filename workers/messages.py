"""The worker's side of the LeaseKeeper RPC as plain values.

The runtime works with these frozen dataclasses; only ``workers.client`` sees
the generated protobuf classes, so the rest of the package (and its tests) do
not depend on protobuf's mutable message objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# How a job's lease ends; the string is what ``App.on_settled`` hooks receive.
from schemas.vocabulary import Outcome as Outcome
from workers.errors import Failure


@dataclass(frozen=True, kw_only=True)
class LeaseRef:
    """Names one lease; the token fences a worker whose lease was given to another."""

    lease_id: str
    token: str


@dataclass(frozen=True, kw_only=True)
class Lease:
    """One claimed job as the leasekeeper handed it out.

    ``job_id`` and the fields after it come from the record's headers: with them the
    worker decodes only ``payload``. A leasekeeper from before them leaves
    ``job_id`` empty, and the worker decodes ``envelope`` instead.
    """

    ref: LeaseRef
    until_ms: int
    attempt: int
    envelope: bytes
    lease_s: int
    job_id: str = ""
    type: str = ""
    tenant_id: str = ""
    queue: str = ""
    payload: bytes = b""
    max_attempts: int = 0
    timeout_s: float = 0.0
    created_at_ms: int = 0
    trace: Mapping[str, str] = field(default_factory=dict)
    # Its class outranks the default class: run before the jobs claimed earlier.
    run_first: bool = False

    @property
    def has_fields(self) -> bool:
        """Whether the claim carried the job's fields and payload (decode only those)."""
        return bool(self.job_id)


@dataclass(frozen=True, kw_only=True)
class LeaseResult:
    """The leasekeeper's answer for one lease in a heartbeat or settle batch."""

    lease_id: str
    ok: bool
    reason: str = ""
    until_ms: int = 0
    # Not settled or extended yet: a restarted leasekeeper has not re-read the
    # lease. The worker keeps the job and asks again.
    retry_later: bool = False


@dataclass(frozen=True, kw_only=True)
class Settlement:
    """An ack, nack (with its classified failure) or release of one lease."""

    ref: LeaseRef
    outcome: Outcome
    failure: Failure | None = None
    # The handler's own run time (not claim-to-settle, which prefetch inflates): the
    # leasekeeper charges it to the job's tenant in weighted fair queuing.
    run_s: float = 0.0

    @classmethod
    def ack(cls, ref: LeaseRef, run_s: float = 0.0) -> Settlement:
        return cls(ref=ref, outcome=Outcome.ACK, run_s=run_s)

    @classmethod
    def nack(cls, ref: LeaseRef, failure: Failure, run_s: float = 0.0) -> Settlement:
        return cls(ref=ref, outcome=Outcome.NACK, failure=failure, run_s=run_s)

    @classmethod
    def release(cls, ref: LeaseRef) -> Settlement:
        return cls(ref=ref, outcome=Outcome.RELEASE)
