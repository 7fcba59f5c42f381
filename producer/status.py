"""What ``producer cancel`` can truthfully say, from ``jobs.Q.status``.

The leasekeeper writes one status record when a job succeeds, dies or is
cancelled (compacted, keyed by job id, one partition). ``cancel`` reads the
topic before recording the cancellation (a job that already ended is not
cancelled, and the answer says when it ended), then waits a few seconds for the
leasekeeper to answer for the cancellation (skipped while waiting, or its lease
ended while running). A job no leasekeeper answers for is not found yet: the
cancellation stays recorded and skips the job if it appears within the control
topic's retention.

The read is a scan of the status partition's tail (``MAX_SCAN`` records): cheap
for the jobs a person cancels by hand, which are recent.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from types import TracebackType

from jobcore.control import CancelledHow, JobEnd, JobStatus
from jobcore.kafka import (
    Consumer,
    KafkaError,
    KafkaSettings,
    Message,
    TopicPartition,
    make_consumer,
)

# The most recent status records a cancel looks through before it records.
MAX_SCAN = 1_000_000
# How long the cancellation stays recorded (the control topic's retention), in days.
CANCEL_DAYS = 35


class StatusError(RuntimeError):
    """The status topic could not be read (a non-retriable error)."""


class CancelOutcome(StrEnum):
    """Which case applied; each has its exit code (``EXIT_CODES``)."""

    CANCELLED_WAITING = "cancelled while waiting"
    LEASE_ENDED = "lease ended while running"
    ALREADY_SUCCEEDED = "not cancelled: already succeeded"
    ALREADY_DEAD = "not cancelled: already dead"
    NOT_FOUND = "not found yet"
    RECORDED = "cancellation recorded"  # no status topic: the queue predates it


class CancelExit(IntEnum):
    """``producer cancel`` exit codes, beside every command's 1 (failure), 2 (setup
    mistake) and 3 (Kafka unreachable), after which nothing was recorded."""

    CANCELLED = 0
    RECORDED = 0
    LEASE_ENDED = 4
    ALREADY_ENDED = 5
    NOT_FOUND = 6


EXIT_CODES = {
    CancelOutcome.CANCELLED_WAITING: CancelExit.CANCELLED,
    CancelOutcome.RECORDED: CancelExit.RECORDED,
    CancelOutcome.LEASE_ENDED: CancelExit.LEASE_ENDED,
    CancelOutcome.ALREADY_SUCCEEDED: CancelExit.ALREADY_ENDED,
    CancelOutcome.ALREADY_DEAD: CancelExit.ALREADY_ENDED,
    CancelOutcome.NOT_FOUND: CancelExit.NOT_FOUND,
}


@dataclass(frozen=True, kw_only=True)
class CancelAnswer:
    job_id: str
    outcome: CancelOutcome
    status: JobStatus | None = None

    @property
    def exit_code(self) -> int:
        return int(EXIT_CODES[self.outcome])

    def message(self, describe_time: Callable[[int], str]) -> str:
        """One line for a person; ``describe_time`` renders epoch ms."""
        status, job = self.status, self.job_id
        if self.outcome is CancelOutcome.RECORDED:
            return "cancellation recorded: the job will be skipped if it has not run yet"
        if self.outcome is CancelOutcome.NOT_FOUND:
            return (
                f"job {job} not found yet: cancellation recorded; it will be skipped if it "
                f"appears within {CANCEL_DAYS} days"
            )
        assert status is not None
        at = describe_time(status.at_ms)
        if self.outcome is CancelOutcome.CANCELLED_WAITING:
            return f"cancelled {job} while it waited (ready or delayed): it will not run"
        if self.outcome is CancelOutcome.LEASE_ENDED:
            return (
                f"cancelled {job} while it ran (attempt {status.attempt}): its lease ended at {at}"
            )
        ended = "succeeded" if status.state is JobEnd.SUCCEEDED else f"died ({status.reason})"
        return f"not cancelled: job {job} already {ended} at {at} (attempt {status.attempt})"


def ended(status: JobStatus) -> CancelOutcome:
    """The answer a status record gives (pure)."""
    if status.state is JobEnd.SUCCEEDED:
        return CancelOutcome.ALREADY_SUCCEEDED
    if status.state is JobEnd.DEAD:
        return CancelOutcome.ALREADY_DEAD
    if status.reason == CancelledHow.RUNNING.value:
        return CancelOutcome.LEASE_ENDED
    return CancelOutcome.CANCELLED_WAITING


class StatusReader:
    """Reads one queue's status partition: the latest record of a job, then new ones."""

    def __init__(
        self, settings: KafkaSettings, topic: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._topic = topic
        self._clock = clock
        self._consumer: Consumer = make_consumer(settings, f"cancel.{uuid.uuid4().hex}")
        low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        self._start, self._end = max(low, high - MAX_SCAN), high
        self._consumer.assign([TopicPartition(topic, 0, self._start)])

    def latest(self, job_id: str, timeout_s: float = 30.0) -> JobStatus | None:
        """The last status of ``job_id`` written before this reader started."""
        found: JobStatus | None = None
        deadline = self._clock() + timeout_s
        while self._position() < self._end and self._clock() < deadline:
            for message in self._consumer.consume(num_messages=500, timeout=0.2):
                status = _status(message, job_id)
                found = status or found
        return found

    def wait_for(self, job_id: str, timeout_s: float) -> JobStatus | None:
        """The first status of ``job_id`` written from now on, within ``timeout_s``."""
        deadline = self._clock() + timeout_s
        while self._clock() < deadline:
            for message in self._consumer.consume(num_messages=500, timeout=0.2):
                status = _status(message, job_id)
                if status is not None:
                    return status
        return None

    def _position(self) -> int:
        (tp,) = self._consumer.position([TopicPartition(self._topic, 0)])
        return max(self._start, int(tp.offset))  # no position before the first fetch

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> StatusReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _status(message: Message, job_id: str) -> JobStatus | None:
    error = message.error()
    if error is not None:
        if error.code() == KafkaError._PARTITION_EOF or error.retriable():
            return None
        raise StatusError(f"reading the status topic failed: {error}")
    if message.key() != job_id.encode() or message.value() is None:
        return None
    value = message.value()
    assert value is not None
    return JobStatus.decode(value)
