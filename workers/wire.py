"""Claims, results and settlements between the worker's values and the RPC's messages.

One value is made per claimed job and one message per settled job, so this is
compiled with the worker's hot path (``compiled_modules.txt``), like its
leasekeeper side (``leasekeeper.rpc.wire``).
"""

from __future__ import annotations

import secrets
from typing import Final

from jobcore.progress import JobProgress
from schemas import worker_pb2
from schemas.lease_answer import LeaseAnswer
from workers.messages import ClaimedJob, LeaseRef, SettleKind, WorkerSettlement

_OUTCOMES: Final = {
    SettleKind.ACK: worker_pb2.ACK,
    SettleKind.NACK: worker_pb2.NACK,
    SettleKind.RELEASE: worker_pb2.RELEASE,
}


def settle_id() -> str:
    """A fresh id for one Settle, sent again with it when its answer is lost: 16 random
    bytes, so no two Settles of a worker (or of two with one worker id) share one."""
    return secrets.token_hex(16)


def lease(job: worker_pb2.ClaimedJob) -> ClaimedJob:
    ref = LeaseRef(lease_id=job.lease_id, token=job.lease_token)
    if not job.job_id:  # a leasekeeper that sends only the envelope
        return ClaimedJob(ref=ref, until_ms=job.lease_until_ms, attempt=job.attempt,
                     envelope=job.envelope, lease_s=job.lease_s,
                     run_first=job.run_first)  # fmt: skip
    return ClaimedJob(ref=ref, until_ms=job.lease_until_ms, attempt=job.attempt,
                 envelope=job.envelope, lease_s=job.lease_s, job_id=job.job_id,
                 type=job.type, tenant_id=job.tenant_id, queue=job.queue,
                 payload=job.payload, max_attempts=job.max_attempts,
                 timeout_s=job.timeout_s, created_at_ms=job.created_at_ms,
                 trace=dict(job.trace) if job.trace else {},
                 run_first=job.run_first)  # fmt: skip


def beat(ref: LeaseRef, started: bool, progress: JobProgress | None) -> worker_pb2.LeaseRef:
    """One lease of a heartbeat: whether its handler started, and its latest progress."""
    if progress is None:
        return worker_pb2.LeaseRef(lease_id=ref.lease_id, lease_token=ref.token, started=started)
    return worker_pb2.LeaseRef(
        lease_id=ref.lease_id,
        lease_token=ref.token,
        started=started,
        progress=worker_pb2.Progress(fraction=progress.fraction, message=progress.message),
    )


def result(result: worker_pb2.LeaseResult) -> LeaseAnswer:
    return LeaseAnswer(
        lease_id=result.lease_id,
        ok=result.ok,
        reason=result.reason,
        until_ms=result.lease_until_ms,
        retry_later=result.retry_later,
    )


def settlement(settlement: WorkerSettlement) -> worker_pb2.Settlement:
    message = worker_pb2.Settlement(
        lease=worker_pb2.LeaseRef(
            lease_id=settlement.ref.lease_id, lease_token=settlement.ref.token
        ),
        outcome=_OUTCOMES[settlement.outcome],
        run_s=settlement.run_s,
    )
    if settlement.result:  # None returned: nothing to send, nothing set
        message.result = settlement.result
    if settlement.progress is not None:  # on the lease, as a heartbeat carries it
        message.lease.progress.fraction = settlement.progress.fraction
        message.lease.progress.message = settlement.progress.message
    failure = settlement.failure
    if failure is not None:
        message.error_class = failure.error_class
        message.error_message = failure.message
        message.traceback = failure.traceback
        message.retry_after_s = failure.retry_after_s
        message.permanent = failure.permanent
    return message
