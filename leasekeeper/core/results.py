"""An ack that carries a return value: its result record, made durable before the job
counts as resolved.

An ack without a result resolves its offset at once. One with a result becomes a
``CopyKind.RESULT`` copy to ``jobs.Q.results`` and takes the path a retry copy
takes (``copy_queue``, ``outbox``): the offset resolves (as acked) only from the
copy's delivery report, so a crash before the record is durable leaves the job
unresolved and it runs again; its status record ("succeeded") is sent only then
too, so a reader that sees the status finds the result. Kafka refusing the topic
(missing, not authorised) drops the result with a warning and resolves the job
as acked, as a status record is dropped: it never stalls the partition.
"""

from __future__ import annotations

import logging
import time

from jobcore.control import JobStatus
from jobcore.results import too_large_message
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Lease, SettleKind, Settlement

log = logging.getLogger(__name__)

# The error class of an ack refused here for its result's size (a worker whose cap
# was set higher than this leasekeeper's, or one from before the cap).
RESULT_TOO_LARGE = "ResultTooLarge"
_WARN_EVERY_S = 60.0


class ResultPath:
    """Checks acks' results against this leasekeeper's cap and makes their copies."""

    def __init__(self, *, limit: int, status_records: bool, queue: str = "") -> None:
        self._limit = limit
        self._status_records = status_records
        self._queue = queue
        self._warned_at = float("-inf")

    def checked(self, item: Settlement, job_type: str) -> Settlement:
        """``item``, or over the cap a permanent nack that says where the value belongs."""
        size = len(item.result)
        if size <= self._limit:
            return item
        message = too_large_message(job_type, size, self._limit)
        return Settlement(lease_id=item.lease_id, token=item.token, outcome=SettleKind.NACK,
                          error_class=RESULT_TOO_LARGE, message=message, permanent=True,
                          run_s=item.run_s)  # fmt: skip

    def copy(self, lease: Lease, item: Settlement, status: JobStatus | None) -> CopyRequest:
        """The result record of an acked job; ``status`` is sent once it is durable."""
        if not self._status_records:
            self._warn_no_status()
        pending = lease.pending
        return CopyRequest(kind=CopyKind.RESULT, source=pending.tp, offset=pending.offset,
                           generation=pending.generation, raw_key=pending.job.job_id.encode(),
                           raw_value=item.result, status=status, run_s=item.run_s)  # fmt: skip

    def _warn_no_status(self) -> None:
        """``--no-status`` with results: written, but a waiting caller cannot tell a dead or
        cancelled job from one still running. Warned, not refused: the values still reach
        their callers. Once a minute at most."""
        now = time.monotonic()
        if now - self._warned_at < _WARN_EVERY_S:
            return
        self._warned_at = now
        log.warning(
            "queue %s: handlers return results but status records are off (--no-status): "
            "results are written, but JobProducer.result() cannot tell a dead or cancelled "
            "job from one still running (it waits out its timeout); drop --no-status",
            self._queue or "?",
        )
