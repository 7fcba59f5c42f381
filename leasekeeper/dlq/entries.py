"""Dead letters as read back from ``jobs.Q.dlq``, and the filter that selects them.

A record on the DLQ can fail to decode at two levels: the ``DeadLetter`` itself
(corrupt bytes, a schema this reader lacks) or the job envelope inside it (null
for a source record that was already undecodable). Neither stops a listing or a
replay: the entry keeps the ``problem`` and the tools report it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from schemas.codec import DecodeError, EnvelopeCodec
from schemas.job import AttemptError, DeadLetter, Job

__all__ = ["DeadLetterFilter", "DlqEntry", "decode_entry", "format_ms", "parse_time_ms"]


@dataclass(frozen=True, kw_only=True)
class DlqEntry:
    """One record of the DLQ topic, decoded as far as it goes."""

    partition: int
    offset: int
    letter: DeadLetter | None  # None: the DLQ record itself is unreadable
    job: Job | None  # None: see ``problem``
    problem: str | None = None

    @property
    def last_error(self) -> AttemptError | None:
        return self.job.errors[-1] if self.job is not None and self.job.errors else None

    @property
    def where(self) -> str:
        return f"partition {self.partition} offset {self.offset}"


def decode_entry(
    codec: EnvelopeCodec, partition: int, offset: int, value: bytes | None
) -> DlqEntry:
    """Decode a DLQ record and the job inside it; never raises on bad bytes."""
    try:
        letter = codec.decode_dead_letter(value)
    except DecodeError as exc:
        return DlqEntry(
            partition=partition, offset=offset, letter=None, job=None, problem=f"corrupt: {exc}"
        )
    if letter.envelope is None:
        problem = f"{letter.reason}: {letter.detail}"
        return DlqEntry(
            partition=partition, offset=offset, letter=letter, job=None, problem=problem
        )
    try:
        job = codec.decode(letter.envelope)
    except DecodeError as exc:
        return DlqEntry(
            partition=partition,
            offset=offset,
            letter=letter,
            job=None,
            problem=f"envelope undecodable: {exc}",
        )
    return DlqEntry(partition=partition, offset=offset, letter=letter, job=job)


@dataclass(frozen=True, kw_only=True)
class DeadLetterFilter:
    """Which dead letters a command acts on; unset fields match everything.

    ``error_class`` matches the class of the job's *last* attempt (the failure
    that killed it). ``since_ms`` is inclusive and ``until_ms`` exclusive, both
    against ``died_at_ms``. A criterion about the job (type, tenant, error
    class, job id) never matches an entry without a decodable job.
    """

    type: str | None = None
    tenant: str | None = None
    error_class: str | None = None
    reason: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    job_id: str | None = None

    @property
    def is_empty(self) -> bool:
        return all(value is None for value in asdict(self).values())

    def fingerprint(self) -> str:
        """A short stable id of the criteria: names the replay group of this selection."""
        canonical = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:8]

    def matches(self, entry: DlqEntry) -> bool:
        return self._matches_letter(entry.letter) and self._matches_job(entry)

    def _matches_letter(self, letter: DeadLetter | None) -> bool:
        if letter is None:
            return self.is_empty
        if self.reason is not None and letter.reason != self.reason:
            return False
        if self.since_ms is not None and letter.died_at_ms < self.since_ms:
            return False
        return self.until_ms is None or letter.died_at_ms < self.until_ms

    def _matches_job(self, entry: DlqEntry) -> bool:
        wanted = (self.type, self.tenant, self.error_class, self.job_id)
        if all(value is None for value in wanted):
            return True
        job = entry.job
        if job is None:
            return False
        last = entry.last_error
        return (
            (self.type is None or job.type == self.type)
            and (self.tenant is None or job.tenant_id == self.tenant)
            and (self.job_id is None or job.job_id == self.job_id)
            and (
                self.error_class is None
                or (last is not None and last.error_class == self.error_class)
            )
        )


def parse_time_ms(text: str) -> int:
    """ISO 8601 (``2025-03-01``, ``2025-03-01T12:00:00+02:00``, ``...Z``) in epoch ms.

    A time without an offset is taken as UTC, the zone ``list`` prints.
    """
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r} (e.g. 2025-03-01T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def format_ms(epoch_ms: int) -> str:
    """Epoch ms as ISO 8601 UTC to the second, the form ``--since``/``--until`` accept."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
