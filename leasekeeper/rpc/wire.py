"""Claims and settlements between the engine's values and the worker RPC's messages.

One message is built for every claimed job and one settlement read for every
settled job: interpreted, that per-job conversion was among the leasekeeper's
larger costs on a no-op drain, so it is compiled with the hot path
(``compiled_modules.txt``) and the servicer (``leasekeeper.rpc.server``) calls it once
per batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from jobcore.progress import JobProgress
from leasekeeper.core.leases import Grant, Pending, SettleKind, Settlement
from schemas import worker_pb2 as pb
from schemas.lease_answer import LeaseAnswer

# The longest delay the queue can hold (the delay tiers reach 30 days).
MAX_RETRY_AFTER_S = 30 * 24 * 3600.0

_OUTCOMES = {pb.ACK: SettleKind.ACK, pb.NACK: SettleKind.NACK, pb.RELEASE: SettleKind.RELEASE}

# What a ``ClaimedJob`` costs besides its strings and bytes, at most: 9 length-delimited
# fields (8 and the job's own framing in the answer's list) of up to 2 tag and 5 length
# bytes each, and 7 numbers and a flag at their longest (varints of 10 bytes).
_JOB_FRAMING = 9 * 7 + 70
_TOKEN = 16  # ``mint_token``: 8 random bytes in hex
_TRACE_ENTRY = 19  # one map entry's framing: its own, its key's and its value's


def claimed_size(pending: Pending) -> int:
    """At least the encoded size of the ``ClaimedJob`` that leasing ``pending`` would
    send (within a few dozen bytes for ASCII names), from its fields: a claim stops
    adding jobs before its answer passes ``CLAIM_ANSWER_BYTES``, encoding nothing.
    Names count a byte a character when ASCII (``isascii`` reads a flag), else four
    (UTF-8's most); the lease id is ASCII (a Kafka topic's name, two numbers)."""
    job = pending.job
    full = job.full
    payload = len(full.payload) if full is not None else job.payload_end - job.payload_start
    names = len(job.job_id) + len(job.type) + len(job.tenant_id) + len(job.queue)
    if not (job.job_id.isascii() and job.type.isascii() and job.tenant_id.isascii()
            and job.queue.isascii()):  # fmt: skip
        names *= 4
    size = _JOB_FRAMING + _TOKEN + len(pending.envelope) + max(payload, 0) + names
    size += len(pending.lease_id)
    for key, value in job.trace.items():
        chars = len(key) + len(value)
        size += _TRACE_ENTRY + (chars if key.isascii() and value.isascii() else 4 * chars)
    return size


def results_size(answers: list[LeaseAnswer]) -> int:
    """At least the encoded size of ``results(answers)``: what a Settle's answer holds
    besides the jobs its ``then_claim`` got."""
    size = 0
    for a in answers:
        size += 40 + 4 * (len(a.lease_id) + len(a.reason))
    return size


def claimed_jobs(grants: list[Grant], run_first: frozenset[str]) -> list[pb.ClaimedJob]:
    return [claimed(grant, run_first) for grant in grants]


def claimed(grant: Grant, run_first: frozenset[str] = frozenset()) -> pb.ClaimedJob:
    """One claimed job on the wire: the lease, the envelope (for workers that decode
    it), the job's fields and payload (for those that decode only the payload), and
    whether its class (in ``run_first``) runs before the worker's prefetched jobs."""
    job = grant.job
    if job is None:
        return pb.ClaimedJob(lease_id=grant.lease_id, lease_token=grant.token,
                             lease_until_ms=grant.until_ms, attempt=grant.attempt,
                             envelope=grant.envelope,
                             lease_s=max(1, round(grant.lease_s)))  # fmt: skip
    return pb.ClaimedJob(lease_id=grant.lease_id, lease_token=grant.token,
                         lease_until_ms=grant.until_ms, attempt=grant.attempt,
                         envelope=grant.envelope, lease_s=max(1, round(grant.lease_s)),
                         job_id=job.job_id, type=job.type, tenant_id=job.tenant_id,
                         queue=job.queue, payload=grant.payload,
                         max_attempts=job.max_attempts, timeout_s=job.timeout_s,
                         created_at_ms=job.created_at_ms,
                         trace=job.trace or None,
                         run_first=job.priority_class in run_first)  # fmt: skip


def results(answers: list[LeaseAnswer]) -> list[pb.LeaseResult]:
    return [
        pb.LeaseResult(
            lease_id=a.lease_id,
            ok=a.ok,
            reason=a.reason,
            lease_until_ms=a.until_ms,
            retry_later=a.retry_later,
        )
        for a in answers
    ]


def clamp_retry_after(value: float) -> float | None:
    """``value`` made usable by the backoff arithmetic, or None when it already is.

    A foreign or buggy worker may send NaN, a negative number or infinity:
    NaN and negative mean "no hint" (0, the backoff decides); infinity and
    anything longer than the queue can delay become the longest delay.
    """
    if math.isnan(value) or value < 0:
        return 0.0
    if value > MAX_RETRY_AFTER_S:
        return MAX_RETRY_AFTER_S
    return None


def settlements(
    sent: Iterable[pb.Settlement], unusable: Callable[[float, float, str], None]
) -> list[Settlement]:
    """The engine's settlements from the worker's; ``unusable(sent, used, lease_id)``
    hears of each retry delay that had to be clamped. A run time that is not a
    positive finite number counts as not reported (0)."""
    found: list[Settlement] = []
    for s in sent:
        lease = s.lease
        retry_after = s.retry_after_s
        clamped = clamp_retry_after(retry_after)
        if clamped is not None:
            unusable(retry_after, clamped, lease.lease_id)
            retry_after = clamped
        run_s = s.run_s
        found.append(
            Settlement(
                lease_id=lease.lease_id,
                token=lease.lease_token,
                outcome=_OUTCOMES.get(s.outcome, SettleKind.NACK),
                error_class=s.error_class,
                message=s.error_message,
                traceback=s.traceback,
                retry_after_s=retry_after,
                permanent=s.permanent,
                run_s=run_s if math.isfinite(run_s) and run_s > 0 else 0.0,
                result=s.result,
                progress=progress_of(lease),
            )
        )
    return found


def told_progress(leases: Iterable[pb.LeaseRef]) -> dict[str, JobProgress]:
    """The progress a heartbeat carries, by lease id (none from a worker that reports
    none, or from one older than the field). A value out of range is dropped and a
    long message cut (``JobProgress.from_fields``): the worker checks them, this
    guards the leasekeeper's memory against one that does not."""
    told: dict[str, JobProgress] = {}
    for ref in leases:
        value = progress_of(ref)
        if value is not None:
            told[ref.lease_id] = value
    return told


def progress_of(ref: pb.LeaseRef) -> JobProgress | None:
    """The progress a lease reference carries (a heartbeat's, or a settlement's: the
    handler's last value), if any."""
    if not ref.HasField("progress"):
        return None
    return JobProgress.from_fields(ref.progress.fraction, ref.progress.message)
