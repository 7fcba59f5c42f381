"""Whole jobs, decoded from their envelope only for the copies that rewrite them.

The leasekeeper routes, leases and is fair by a record's headers (``JobHead``);
the Avro envelope is decoded only when a copy must change it (a retry or a
dead letter adds an error, a park moves run_at) or ``inspect job`` shows its
history. A record read the slow way (no headers) keeps its decoded job in the
head, so it is never decoded twice.

An envelope that cannot be decoded then is one of two things. Bytes that can never
decode (``DecodeError``) go to the DLQ byte for byte. A schema the registry cannot
give now (``SchemaUnavailable``: not cached, the registry down) says nothing about
the bytes: the copy is held (``CopyKind.HELD``) and decided again once the registry
answers, so a registry outage never dead-letters good jobs.
"""

from __future__ import annotations

from collections.abc import Callable

from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Pending
from schemas.codec import DecodeError
from schemas.confluent import SchemaUnavailable
from schemas.job import Job
from schemas.vocabulary import DeadLetterReason

Decode = Callable[[bytes], Job]


class JobReader:
    """Decodes a pending job's envelope with ``decode`` (the queue's codec)."""

    def __init__(self, decode: Decode | None = None) -> None:
        self._decode = decode

    def full(self, pending: Pending) -> Job:
        """The whole job; raises DecodeError (or the registry's SchemaUnavailable) when
        its envelope cannot be read."""
        full = pending.job.full
        if full is not None:
            return full
        if self._decode is None:
            raise DecodeError("this engine has no envelope decoder (LeaseEngine(decode=...))")
        return self._decode(pending.envelope)

    def copied(self, request: CopyRequest) -> Job | None:
        """The job of a copy sent byte for byte (``request.head`` and ``raw_value``),
        decoded; None when it does not decode (or there is nothing to decode)."""
        if request.job is not None:
            return request.job
        if request.raw_value is None or self._decode is None:
            return None
        try:
            return self._decode(request.raw_value)
        except Exception:  # DecodeError, or the registry's SchemaUnavailable
            return None

    @staticmethod
    def unreadable(
        pending: Pending, error: Exception, *, why: str, again: Callable[[], CopyRequest]
    ) -> CopyRequest:
        """The copy of a job whose headers were fine but whose envelope did not decode
        when it had to be rewritten (``why``). A schema the registry cannot give now:
        held, and ``again`` (the same decision) is called once it can. Anything else:
        kept byte for byte in the DLQ, with the reason."""
        if isinstance(error, SchemaUnavailable):
            return CopyRequest(
                kind=CopyKind.HELD,
                source=pending.tp,
                offset=pending.offset,
                generation=pending.generation,
                head=pending.job,
                detail=f"job {pending.job.job_id}: its {why} waits for its envelope's "
                f"schema: {error}",
                again=again,
            )
        return CopyRequest(
            kind=CopyKind.DEAD_RAW,
            source=pending.tp,
            offset=pending.offset,
            generation=pending.generation,
            raw_key=pending.job.tenant_id.encode(),
            raw_value=pending.envelope,
            reason=DeadLetterReason.UNDECODABLE,
            detail=f"job {pending.job.job_id}: its envelope could not be decoded for its "
            f"{why}: {type(error).__name__}: {error}",
        )
