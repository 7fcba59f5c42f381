"""Records of a queue's small internal topics: cancellations, dedupe keys, job status.

They are compacted topics that every leasekeeper of the queue reads whole (they
are small: one record per cancelled job or per deduplicated key), so the facts
survive restarts and partition moves without any local state. JSON, versioned:
nothing outside the project reads them, and they stay readable with
``kafka-console-consumer``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from json.encoder import encode_basestring_ascii as _text

from jobcore.progress import JobProgress

VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Cancellation:
    """``job_id`` must not run: skipped wherever it waits, its lease ended if running."""

    job_id: str
    cancelled_at_ms: int
    reason: str = ""

    @property
    def key(self) -> bytes:
        return self.job_id.encode()

    def encode(self) -> bytes:
        return json.dumps(
            {"v": VERSION, "job_id": self.job_id, "at": self.cancelled_at_ms, "reason": self.reason}
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Cancellation:
        record = json.loads(data)
        return cls(job_id=record["job_id"], cancelled_at_ms=record["at"], reason=record["reason"])


@dataclass(frozen=True, kw_only=True, slots=True)
class DedupeClaim:
    """The first job admitted with ``key`` for ``tenant``; later ones are skipped."""

    tenant_id: str
    dedupe_key: str
    job_id: str
    seen_at_ms: int

    @property
    def key(self) -> bytes:
        return dedupe_index_key(self.tenant_id, self.dedupe_key)

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": VERSION,
                "tenant": self.tenant_id,
                "key": self.dedupe_key,
                "job_id": self.job_id,
                "at": self.seen_at_ms,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> DedupeClaim:
        record = json.loads(data)
        return cls(
            tenant_id=record["tenant"],
            dedupe_key=record["key"],
            job_id=record["job_id"],
            seen_at_ms=record["at"],
        )


def dedupe_index_key(tenant_id: str, dedupe_key: str) -> bytes:
    """Dedupe keys are scoped to a queue (the topic) and a tenant."""
    return f"{tenant_id}\x00{dedupe_key}".encode()


class JobEnd(StrEnum):
    """How a job ended, as ``jobs.Q.status`` records it."""

    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


class CancelledHow(StrEnum):
    """The ``reason`` of a cancelled job's status: it never ran, or it was stopped."""

    WAITING = "cancelled while waiting"
    RUNNING = "lease ended while running"
    # Skipped as a duplicate of ``JobStatus.duplicate_of``: it never ran.
    DUPLICATE = "skipped as a duplicate"


# A status record stays small: the whole history is in the dead letter.
LAST_ERROR_MAX = 500


class JobStatus:
    """How job ``job_id`` ended: the record of the compacted ``jobs.Q.status`` topic,
    keyed by job id. ``reason`` is the dead-letter reason of a dead job, and
    ``CancelledHow`` of a cancelled one. Written by the leasekeeper, read by
    ``producer cancel`` to say which case applied.

    ``worker`` ran the last attempt, ``last_error`` is that attempt's error
    ("Class: message", cut to LAST_ERROR_MAX) for a dead job; empty when unknown
    (older records). ``duration_s`` is the handler's own run time in the last
    attempt, as its worker reported it (not the lease's age, which prefetch and
    queueing inflate); None when not reported (a cancelled job, a lease that
    expired, older records).

    A job skipped as a duplicate of a dedupe key is recorded as cancelled
    (``CancelledHow.DUPLICATE``) with ``duplicate_of``, the job that holds the key:
    ``decode`` refuses a state it does not know, so a new state would break every
    older reader of the topic, while an extra field is ignored by them
    (``jobcore.job_state`` reads such a record back as skipped).

    ``progress`` is how far the job had got when it ended, as its worker last said in
    a heartbeat (None: it said nothing, or older records).

    ``record`` is where the job's last record was read from (``topic/partition/offset``,
    a lease id: the record a succeeded job ran from, a dead job's last one), so a
    reader can show the job itself; empty when unknown (other ends, older records).

    A slotted class with its own ``__init__``, never changed once made: one is made
    for every job that ends, and compiled, a dataclass keeps its generated
    ``__init__``, run as Python."""

    __slots__ = ("at_ms", "attempt", "duplicate_of", "duration_s", "job_id", "last_error",
                 "progress", "reason", "record", "state", "worker")  # fmt: skip

    def __init__(
        self,
        *,
        job_id: str,
        state: JobEnd,
        at_ms: int,
        attempt: int,
        reason: str = "",
        worker: str = "",
        last_error: str = "",
        duration_s: float | None = None,
        duplicate_of: str = "",
        record: str = "",
        progress: JobProgress | None = None,
    ) -> None:
        self.job_id = job_id
        self.state = state
        self.at_ms = at_ms
        self.attempt = attempt
        self.reason = reason
        self.worker = worker
        self.last_error = last_error
        self.duration_s = duration_s
        self.duplicate_of = duplicate_of
        self.record = record
        self.progress = progress

    def _fields(
        self,
    ) -> tuple[str, JobEnd, int, int, str, str, str, float | None, str, str, JobProgress | None]:
        return (self.job_id, self.state, self.at_ms, self.attempt, self.reason, self.worker,
                self.last_error, self.duration_s, self.duplicate_of, self.record,
                self.progress)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobStatus) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"JobStatus(job_id={self.job_id!r}, state={self.state!r}, at_ms={self.at_ms}, "
                f"attempt={self.attempt}, reason={self.reason!r}, worker={self.worker!r}, "
                f"last_error={self.last_error!r}, duration_s={self.duration_s!r}, "
                f"duplicate_of={self.duplicate_of!r}, record={self.record!r}, "
                f"progress={self.progress!r})")  # fmt: skip

    @property
    def key(self) -> bytes:
        return self.job_id.encode()

    def encode(self) -> bytes:
        """The JSON record, built by formatting: one is written for every job that
        ends, and this is about twice as fast as ``json.dumps`` of a dict (the same
        bytes but for spacing; strings escaped by the json module's own encoder)."""
        extra = "" if self.duration_s is None else f',"duration_s":{round(self.duration_s, 6)!r}'
        if self.duplicate_of:
            extra += f',"duplicate_of":{_text(self.duplicate_of)}'
        if self.record:
            extra += f',"record":{_text(self.record)}'
        if self.progress is not None:
            extra += _progress(self.progress)
        return (
            f'{{"v":{VERSION},"job_id":{_text(self.job_id)},"state":"{self.state.value}",'
            f'"at":{int(self.at_ms)},"attempt":{int(self.attempt)},"reason":{_text(self.reason)},'
            f'"worker":{_text(self.worker)},'
            f'"last_error":{_text(self.last_error[:LAST_ERROR_MAX])}{extra}}}'
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> JobStatus:
        record = json.loads(data)
        return cls(
            job_id=record["job_id"],
            state=JobEnd(record["state"]),
            at_ms=record["at"],
            attempt=record["attempt"],
            reason=record.get("reason", ""),
            worker=record.get("worker", ""),
            last_error=record.get("last_error", ""),
            duration_s=_seconds(record.get("duration_s")),
            duplicate_of=str(record.get("duplicate_of") or ""),
            record=str(record.get("record") or ""),
            progress=JobProgress.from_fields(
                record.get("progress"), record.get("progress_message")
            ),
        )


def _progress(progress: JobProgress) -> str:
    """The record's progress keys (``jobcore.progress``'s JSON form)."""
    text = f',"progress":{float(progress.fraction)!r}'
    if progress.message:
        text += f',"progress_message":{_text(progress.message)}'
    return text


def _seconds(value: object) -> float | None:
    """A reported duration, or None for a missing or nonsensical one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


# The key of a queue's one switch record on its status topic. Not a job id (ids never
# start with NUL), so no job lookup finds it and every job record stays a JobStatus.
STATUS_SWITCH_KEY = b"\x00status-records"


@dataclass(frozen=True, kw_only=True, slots=True)
class StatusSwitchedOff:
    """The queue's leasekeepers write no status records (``leasekeeper serve
    --no-status``), since ``at_ms``. Written to the status topic under
    ``STATUS_SWITCH_KEY`` when a leasekeeper starts with the switch off, and deleted
    (a tombstone) when one starts with it on, so readers can say why a finished job
    has no record instead of "not found yet"."""

    at_ms: int
    instance: str = ""

    def encode(self) -> bytes:
        return json.dumps(
            {"v": VERSION, "records": "off", "at": self.at_ms, "instance": self.instance}
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> StatusSwitchedOff | None:
        """The switch, or None for a record that does not say "off"."""
        try:
            record = json.loads(data)
        except ValueError:
            return None
        if not isinstance(record, dict) or record.get("records") != "off":
            return None
        at = record.get("at")
        return cls(at_ms=at if isinstance(at, int) else 0, instance=str(record.get("instance", "")))
