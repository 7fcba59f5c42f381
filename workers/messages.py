"""The worker's side of the LeaseKeeper RPC as plain values.

The runtime works with these values (never changed once made); only ``workers.client`` sees
the generated protobuf classes, so the rest of the package (and its tests) do
not depend on protobuf's mutable message objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

# How a job's lease ends; the string is what ``App.on_settled`` hooks receive.
from jobcore.progress import JobProgress
from schemas.vocabulary import SettleKind as SettleKind
from workers.errors import Failure


class LeaseRef(NamedTuple):
    """Names one lease; the token fences a worker whose lease was given to another.
    A tuple: it keys the worker's table of held leases, and a tuple's hash and
    equality run in C."""

    lease_id: str
    token: str


class ClaimedJob:
    """One claimed job as the leasekeeper handed it out.

    ``job_id`` and the fields after it come from the record's headers: with them the
    worker decodes only ``payload``. A leasekeeper from before them leaves
    ``job_id`` empty, and the worker decodes ``envelope`` instead.

    Like every value in this module: a slotted class with an ``__init__`` of its own,
    not a dataclass (compiled, a dataclass keeps the generated ``__init__``, run as
    Python for every job), and never changed once made.
    """

    __slots__ = ("attempt", "created_at_ms", "envelope", "job_id", "lease_s", "max_attempts",
                 "payload", "queue", "ref", "run_first", "tenant_id", "timeout_s", "trace",
                 "type", "until_ms")  # fmt: skip

    def __init__(
        self,
        *,
        ref: LeaseRef,
        until_ms: int,
        attempt: int,
        envelope: bytes,
        lease_s: int,
        job_id: str = "",
        type: str = "",
        tenant_id: str = "",
        queue: str = "",
        payload: bytes = b"",
        max_attempts: int = 0,
        timeout_s: float = 0.0,
        created_at_ms: int = 0,
        trace: Mapping[str, str] | None = None,
        run_first: bool = False,
    ) -> None:
        self.ref = ref
        self.until_ms = until_ms
        self.attempt = attempt
        self.envelope = envelope
        self.lease_s = lease_s
        self.job_id = job_id
        self.type = type
        self.tenant_id = tenant_id
        self.queue = queue
        self.payload = payload
        self.max_attempts = max_attempts
        self.timeout_s = timeout_s
        self.created_at_ms = created_at_ms
        self.trace: Mapping[str, str] = {} if trace is None else trace
        # Its class outranks the default class: run before the jobs claimed earlier.
        self.run_first = run_first

    @property
    def has_fields(self) -> bool:
        """Whether the claim carried the job's fields and payload (decode only those)."""
        return bool(self.job_id)

    def _fields(self) -> tuple[object, ...]:
        return (self.ref, self.until_ms, self.attempt, self.envelope, self.lease_s, self.job_id,
                self.type, self.tenant_id, self.queue, self.payload, self.max_attempts,
                self.timeout_s, self.created_at_ms, dict(self.trace), self.run_first)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClaimedJob) and self._fields() == other._fields()

    def __repr__(self) -> str:
        return f"ClaimedJob(ref={self.ref!r}, attempt={self.attempt}, job_id={self.job_id!r})"


class WorkerSettlement:
    """An ack, nack (with its classified failure) or release of one lease. ``run_s``:
    the handler's own run time (not claim-to-settle, which prefetch inflates): the
    leasekeeper charges it to the job's tenant in weighted fair queuing. ``result``:
    an ack's encoded return value (``jobcore.results``); empty when it returned None.
    ``progress``: the handler's last ``ctx.progress``, which a heartbeat may not have
    carried yet (reported in the last second), kept with the job's status."""

    __slots__ = ("failure", "outcome", "progress", "ref", "result", "run_s")

    def __init__(
        self,
        *,
        ref: LeaseRef,
        outcome: SettleKind,
        failure: Failure | None = None,
        run_s: float = 0.0,
        result: bytes = b"",
        progress: JobProgress | None = None,
    ) -> None:
        self.ref = ref
        self.outcome = outcome
        self.failure = failure
        self.run_s = run_s
        self.result = result
        self.progress = progress

    def _fields(self) -> tuple[LeaseRef, SettleKind, Failure | None, float, bytes]:
        return (self.ref, self.outcome, self.failure, self.run_s, self.result)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkerSettlement) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"WorkerSettlement(ref={self.ref!r}, outcome={self.outcome!r}, "
                f"failure={self.failure!r}, run_s={self.run_s})")  # fmt: skip

    @classmethod
    def ack(cls, ref: LeaseRef, run_s: float = 0.0, result: bytes = b"",
            progress: JobProgress | None = None) -> WorkerSettlement:  # fmt: skip
        return cls(ref=ref, outcome=SettleKind.ACK, run_s=run_s, result=result, progress=progress)

    @classmethod
    def nack(cls, ref: LeaseRef, failure: Failure, run_s: float = 0.0,
             progress: JobProgress | None = None) -> WorkerSettlement:  # fmt: skip
        return cls(ref=ref, outcome=SettleKind.NACK, failure=failure, run_s=run_s,
                   progress=progress)  # fmt: skip

    @classmethod
    def release(cls, ref: LeaseRef) -> WorkerSettlement:
        return cls(ref=ref, outcome=SettleKind.RELEASE)
