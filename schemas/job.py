"""Typed views of the Avro records in ``envelope.avsc`` and ``dead_letter.avsc``.

Field names are the Avro names, so ``to_avro`` / ``from_avro`` are plain mappings
and a schema change shows up as a one-line diff here. ``from_avro`` checks every
value's type: it is the boundary where bytes from Kafka become trusted objects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from schemas.vocabulary import DeadLetterReason

__all__ = ["AttemptError", "DeadLetter", "DeadLetterReason", "Job"]

_T = TypeVar("_T")


def _get(record: Mapping[str, object], key: str, kind: type[_T]) -> _T:
    """``record[key]`` when it is a ``kind``; bool never passes as an int."""
    value = record[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"field {key!r}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _get_optional(record: Mapping[str, object], key: str, kind: type[_T]) -> _T | None:
    return None if record.get(key) is None else _get(record, key, kind)


def _get_float(record: Mapping[str, object], key: str) -> float:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"field {key!r}: expected float, got {type(value).__name__}")
    return float(value)


def _get_records(record: Mapping[str, object], key: str) -> list[Mapping[str, object]]:
    items = _get(record, key, list)
    if not all(isinstance(item, Mapping) for item in items):
        raise TypeError(f"field {key!r}: expected a list of records")
    return items


def _get_str_map(record: Mapping[str, object], key: str) -> dict[str, str]:
    value = record[key]
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError(f"field {key!r}: expected a map of strings")
    return dict(value)


@dataclass(frozen=True, kw_only=True)
class AttemptError:
    """Why one attempt failed; a job carries the history so the DLQ explains itself."""

    attempt: int
    at_ms: int
    worker: str
    error_class: str
    message: str
    traceback: str

    def to_avro(self) -> dict[str, object]:
        return {
            "attempt": self.attempt,
            "at_ms": self.at_ms,
            "worker": self.worker,
            "error_class": self.error_class,
            "message": self.message,
            "traceback": self.traceback,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, object]) -> AttemptError:
        return cls(
            attempt=_get(record, "attempt", int),
            at_ms=_get(record, "at_ms", int),
            worker=_get(record, "worker", str),
            error_class=_get(record, "error_class", str),
            message=_get(record, "message", str),
            traceback=_get(record, "traceback", str),
        )


@dataclass(frozen=True, kw_only=True)
class Job:
    """The envelope every queue record carries; ``payload`` is the encoded job-type record."""

    job_id: str
    queue: str
    tenant_id: str
    type: str
    payload: bytes
    priority: int = 0
    run_at_ms: int = 0
    attempt: int = 0
    max_attempts: int = 8
    timeout_s: float = 30.0
    dedupe_key: str | None = None
    created_at_ms: int
    trace: Mapping[str, str] = field(default_factory=dict)
    errors: tuple[AttemptError, ...] = ()
    replay_count: int = 0
    # The priority class: its own topic and share of the window, dispatched by weight.
    priority_class: str = "default"
    # Per-key ordering (docs/ordering.md): jobs of one queue and tenant with the same
    # key run one at a time in enqueue order. ``ordering_seq`` is the job's place in
    # its key's line, stamped by the leasekeeper when it first leaves its class topic.
    ordering_key: str | None = None
    ordering_seq: int = -1

    def __post_init__(self) -> None:
        # Copies, so a frozen Job never shares a mutable dict or list with its caller.
        object.__setattr__(self, "trace", dict(self.trace))
        object.__setattr__(self, "errors", tuple(self.errors))

    def to_avro(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "queue": self.queue,
            "tenant_id": self.tenant_id,
            "type": self.type,
            "payload": self.payload,
            "priority": self.priority,
            "run_at_ms": self.run_at_ms,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "timeout_s": self.timeout_s,
            "dedupe_key": self.dedupe_key,
            "created_at_ms": self.created_at_ms,
            "trace": dict(self.trace),
            "errors": [e.to_avro() for e in self.errors],
            "replay_count": self.replay_count,
            "priority_class": self.priority_class,
            "ordering_key": self.ordering_key,
            "ordering_seq": self.ordering_seq,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, object]) -> Job:
        """The job in ``record``; ValueError names a number the engine cannot use."""
        job = cls._build(record)
        problem = number_problem(job)
        if problem is not None:
            raise ValueError(problem)
        return job

    @classmethod
    def _build(cls, record: Mapping[str, object]) -> Job:
        return cls(
            job_id=_get(record, "job_id", str),
            queue=_get(record, "queue", str),
            tenant_id=_get(record, "tenant_id", str),
            type=_get(record, "type", str),
            payload=_get(record, "payload", bytes),
            priority=_get(record, "priority", int),
            run_at_ms=_get(record, "run_at_ms", int),
            attempt=_get(record, "attempt", int),
            max_attempts=_get(record, "max_attempts", int),
            timeout_s=_get_float(record, "timeout_s"),
            dedupe_key=_get_optional(record, "dedupe_key", str),
            created_at_ms=_get(record, "created_at_ms", int),
            trace=_get_str_map(record, "trace"),
            errors=tuple(AttemptError.from_avro(e) for e in _get_records(record, "errors")),
            replay_count=_get(record, "replay_count", int),
            priority_class=_get(record, "priority_class", str)
            if "priority_class" in record
            else "default",
            ordering_key=_get_optional(record, "ordering_key", str),
            ordering_seq=_get(record, "ordering_seq", int) if "ordering_seq" in record else -1,
        )


def number_problem(job: Job) -> str | None:
    """What is wrong with the numbers of ``job``, or None when the engine can use them.

    Records may come from a foreign or buggy producer: a NaN or infinite
    ``timeout_s`` breaks lease deadlines, a negative ``attempt`` or a
    ``max_attempts`` below 1 breaks attempt counting. Such a job is undecodable
    (dead-lettered with this message), never a crash of the leasekeeper.
    """
    if not math.isfinite(job.timeout_s) or job.timeout_s <= 0:
        return f"field 'timeout_s': expected a finite number of seconds > 0, got {job.timeout_s}"
    if job.attempt < 0:
        return f"field 'attempt': expected 0 or more, got {job.attempt}"
    if job.max_attempts < 1:
        return f"field 'max_attempts': expected 1 or more, got {job.max_attempts}"
    if job.replay_count < 0:
        return f"field 'replay_count': expected 0 or more, got {job.replay_count}"
    return None


@dataclass(frozen=True, kw_only=True)
class DeadLetter:
    """A record moved to ``jobs.Q.dlq``, with where it came from and why it died.

    ``envelope`` keeps the job as encoded bytes rather than a nested record, so the
    dead-letter schema never changes when the envelope does; ``raw_value`` keeps a
    record that could not be decoded at all, for a human to look at.
    """

    envelope: bytes | None = None
    raw_value: bytes | None = None
    raw_key: bytes | None = None
    reason: str
    detail: str
    source_topic: str
    source_partition: int
    source_offset: int
    died_at_ms: int

    def to_avro(self) -> dict[str, object]:
        return {
            "envelope": self.envelope,
            "raw_value": self.raw_value,
            "raw_key": self.raw_key,
            "reason": str(self.reason),
            "detail": self.detail,
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "died_at_ms": self.died_at_ms,
        }

    @classmethod
    def from_avro(cls, record: Mapping[str, object]) -> DeadLetter:
        return cls(
            envelope=_get_optional(record, "envelope", bytes),
            raw_value=_get_optional(record, "raw_value", bytes),
            raw_key=_get_optional(record, "raw_key", bytes),
            reason=_get(record, "reason", str),
            detail=_get(record, "detail", str),
            source_topic=_get(record, "source_topic", str),
            source_partition=_get(record, "source_partition", int),
            source_offset=_get(record, "source_offset", int),
            died_at_ms=_get(record, "died_at_ms", int),
        )
