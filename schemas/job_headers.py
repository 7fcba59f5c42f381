"""The Kafka headers of a job record: what the leasekeeper routes, leases and is fair by.

Decoding the Avro envelope of every record was a third of the leasekeeper's CPU,
although it reads only a few fields of it. So every writer of a job record (the
producer, the outbox relay, the cron scheduler, DLQ replay, the leasekeeper's own
retry, hop and park copies) also writes those fields as headers, and the
leasekeeper decodes the envelope only when it must rewrite it (a retry copy, a
dead letter) or show its history (``inspect job``).

The format lives here and nowhere else. ``lq.v`` names its version; a reader that
finds no headers, another version, or a value it cannot parse returns None, and
the caller decodes the envelope as before (records of older producers, or of a
newer format, still work). The tenant is the record key. Numbers are ASCII
decimal, strings UTF-8; a field at its envelope default is left out.

| header | field | absent means |
| --- | --- | --- |
| ``job_id`` | job id (the header producers always wrote) | (required) |
| ``lq.v`` | header format version, ``1`` | no headers: decode |
| ``lq.q`` | queue | (required) |
| ``lq.ty`` | job type | (required) |
| ``lq.pc`` | priority class | ``default`` |
| ``lq.a`` | attempts already made | 0 |
| ``lq.ma`` | max attempts | (required) |
| ``lq.r`` | run_at, epoch ms | 0 (now) |
| ``lq.to`` | timeout_s | (required) |
| ``lq.dk`` | dedupe key | none |
| ``lq.c`` | created_at, epoch ms | (required) |
| ``lq.p`` | where the payload sits in the value: ``start,length`` | (required) |
| ``lq.tr`` | trace context, a JSON object of strings | ``{}`` |
| ``lq.ok`` | ordering key | none |
| ``lq.os`` | ordering seq (its place in its key's line) | -1 |
| ``lq.sw`` | a diverted job's switch (``producer.flood``): ``topic,p,offset,until_ms`` | none |

A copy whose attempt or run_at changes is written with new headers
(``job_headers`` of the rewritten job), never with the old ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import cast

from schemas.job import Job

__all__ = [
    "VERSION",
    "JobHead",
    "Switch",
    "job_headers",
    "read_head",
    "read_switch",
    "switch_header",
]

VERSION = b"1"
H_JOB_ID = "job_id"
H_VERSION = "lq.v"
H_QUEUE = "lq.q"
H_TYPE = "lq.ty"
H_CLASS = "lq.pc"
H_ATTEMPT = "lq.a"
H_MAX_ATTEMPTS = "lq.ma"
H_RUN_AT = "lq.r"
H_TIMEOUT = "lq.to"
H_DEDUPE = "lq.dk"
H_CREATED = "lq.c"
H_PAYLOAD = "lq.p"
H_TRACE = "lq.tr"
H_ORDERING_KEY = "lq.ok"
H_ORDERING_SEQ = "lq.os"
H_SWITCH = "lq.sw"

_SINGLE_OBJECT = b"\xc3\x01"  # + 8-byte fingerprint: schemas.codec
_CONFLUENT = b"\x00"  # + 4-byte schema id: schemas.confluent
_DEFAULT_CLASS = "default"

# What confluent-kafka's ``Message.headers()`` returns (values are bytes on the wire).
Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]


class JobHead:
    """The envelope fields the leasekeeper and the worker's claim need, without the
    payload or the error history: read from headers (or from a decoded ``Job``,
    kept in ``full`` so it is never decoded twice). A slotted class, not a
    dataclass: one is made per fetched record, on the hottest path there is."""

    __slots__ = (
        "attempt",
        "created_at_ms",
        "dedupe_key",
        "full",
        "job_id",
        "max_attempts",
        "ordering_key",
        "ordering_seq",
        "payload_end",
        "payload_start",
        "priority_class",
        "queue",
        "run_at_ms",
        "tenant_id",
        "timeout_s",
        "trace",
        "type",
    )

    job_id: str
    queue: str
    tenant_id: str
    type: str
    priority_class: str
    attempt: int
    max_attempts: int
    run_at_ms: int
    timeout_s: float
    dedupe_key: str | None
    created_at_ms: int
    trace: Mapping[str, str]
    # The payload is value[payload_start:payload_end] of the record it came from.
    payload_start: int
    payload_end: int
    full: Job | None
    # Per-key ordering (leasekeeper/ordering/keys.py): the key and the job's place in its line.
    ordering_key: str | None
    ordering_seq: int

    def __init__(
        self,
        job_id: str,
        queue: str,
        tenant_id: str,
        type: str,
        priority_class: str,
        attempt: int,
        max_attempts: int,
        run_at_ms: int,
        timeout_s: float,
        dedupe_key: str | None,
        created_at_ms: int,
        trace: Mapping[str, str],
        payload_start: int = 0,
        payload_end: int = 0,
        full: Job | None = None,
        ordering_key: str | None = None,
        ordering_seq: int = -1,
    ) -> None:
        self.job_id = job_id
        self.queue = queue
        self.tenant_id = tenant_id
        self.type = type
        self.priority_class = priority_class
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.run_at_ms = run_at_ms
        self.timeout_s = timeout_s
        self.dedupe_key = dedupe_key
        self.created_at_ms = created_at_ms
        self.trace = trace
        self.payload_start = payload_start
        self.payload_end = payload_end
        self.full = full
        self.ordering_key = ordering_key
        self.ordering_seq = ordering_seq

    @classmethod
    def of(cls, job: Job) -> JobHead:
        """The head of a decoded job (the slow path); the job is kept."""
        return cls(job.job_id, job.queue, job.tenant_id, job.type, job.priority_class,
                   job.attempt, job.max_attempts, job.run_at_ms, job.timeout_s, job.dedupe_key,
                   job.created_at_ms, job.trace, full=job, ordering_key=job.ordering_key,
                   ordering_seq=job.ordering_seq)  # fmt: skip

    def payload(self, value: bytes) -> bytes:
        """The encoded payload, cut from ``value`` (the record this head came with)."""
        if self.full is not None:
            return self.full.payload
        return value[self.payload_start : self.payload_end]

    def __repr__(self) -> str:
        return f"JobHead(job_id={self.job_id!r}, type={self.type!r}, tenant={self.tenant_id!r})"


def job_headers(job: Job | JobHead, value: bytes) -> list[tuple[str, bytes]]:
    """The headers of a record whose value is ``value``, the encoded ``job``, or the
    record a head was read from (a copy of it byte for byte: its payload span is
    known, nothing is decoded).

    Only ``job_id`` when the payload cannot be found in ``value`` (a framing this
    module does not know): such a record is read through the envelope, as before.
    """
    headers: list[tuple[str, bytes]] = [(H_JOB_ID, job.job_id.encode())]
    if isinstance(job, JobHead):
        span: tuple[int, int] | None = (
            (job.payload_start, job.payload_end - job.payload_start)
            if job.full is None
            else _payload_span(job.full, value)
        )
    else:
        span = _payload_span(job, value)
    if span is None:
        return headers
    headers += [
        (H_VERSION, VERSION),
        (H_QUEUE, job.queue.encode()),
        (H_TYPE, job.type.encode()),
        (H_MAX_ATTEMPTS, b"%d" % job.max_attempts),
        (H_TIMEOUT, repr(float(job.timeout_s)).encode()),
        (H_CREATED, b"%d" % job.created_at_ms),
        (H_PAYLOAD, b"%d,%d" % span),
    ]
    if job.priority_class != _DEFAULT_CLASS:
        headers.append((H_CLASS, job.priority_class.encode()))
    if job.attempt:
        headers.append((H_ATTEMPT, b"%d" % job.attempt))
    if job.run_at_ms:
        headers.append((H_RUN_AT, b"%d" % job.run_at_ms))
    if job.dedupe_key is not None:
        headers.append((H_DEDUPE, job.dedupe_key.encode()))
    if job.trace:
        headers.append((H_TRACE, json.dumps(dict(job.trace), separators=(",", ":")).encode()))
    if job.ordering_key is not None:
        headers.append((H_ORDERING_KEY, job.ordering_key.encode()))
        if job.ordering_seq >= 0:
            headers.append((H_ORDERING_SEQ, b"%d" % job.ordering_seq))
    return headers


def read_head(key: bytes | None, headers: Headers | None, value: bytes) -> JobHead | None:
    """The head of a record from its key and headers, or None: no headers of this
    version, or a value that does not parse or that the engine could not use (the
    caller then decodes the envelope, which names the problem)."""
    if not headers or key is None:
        return None
    found = dict(headers)
    if found.get(H_VERSION) != VERSION:
        return None
    try:
        # Header values are bytes on the wire; anything else fails to parse below.
        head = _parse(key, cast("dict[str, bytes]", found))
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    if not _usable(head, len(value)):
        return None
    return head


def _parse(key: bytes, found: dict[str, bytes]) -> JobHead:
    """Raises KeyError, ValueError (UnicodeDecodeError too), TypeError or
    AttributeError (a header without a value) on headers that do not parse. Written
    flat, without a helper per field: it runs once per fetched record."""
    get = found.get
    start, length = found[H_PAYLOAD].split(b",")
    attempt, run_at, pclass, dedupe = get(H_ATTEMPT), get(H_RUN_AT), get(H_CLASS), get(H_DEDUPE)
    trace = get(H_TRACE)
    begin = int(start)
    key_, seq = get(H_ORDERING_KEY), get(H_ORDERING_SEQ)
    return JobHead(
        found[H_JOB_ID].decode(),
        found[H_QUEUE].decode(),
        key.decode(),
        found[H_TYPE].decode(),
        pclass.decode() if pclass is not None else _DEFAULT_CLASS,
        int(attempt) if attempt is not None else 0,
        int(found[H_MAX_ATTEMPTS]),
        int(run_at) if run_at is not None else 0,
        float(found[H_TIMEOUT]),
        dedupe.decode() if dedupe is not None else None,
        int(found[H_CREATED]),
        _trace(trace) if trace is not None else {},
        begin,
        begin + int(length),
        None,
        key_.decode() if key_ is not None else None,
        int(seq) if seq is not None else -1,
    )


def _trace(raw: bytes) -> dict[str, str]:
    parsed = json.loads(raw)
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
    ):
        raise ValueError("trace: expected a JSON object of strings")
    return parsed


def _usable(head: JobHead, size: int) -> bool:
    """The numbers ``schemas.job.number_problem`` checks of a decoded job, and a
    payload span inside the value."""
    return (
        math.isfinite(head.timeout_s)
        and head.timeout_s > 0
        and head.attempt >= 0
        and head.max_attempts >= 1
        and 0 < head.payload_start <= head.payload_end <= size
        and bool(head.job_id)
    )


def _payload_span(job: Job, value: bytes) -> tuple[int, int] | None:
    """(start, length) of ``job.payload`` in ``value``, checked byte for byte.

    The envelope begins with job_id, queue, tenant_id, type and payload (never
    reordered: schema changes only add fields at the end), each an Avro length
    (zigzag varint) and its bytes, after the single-object or Confluent framing.
    """
    if value[:2] == _SINGLE_OBJECT:
        at = 10
    elif value[:1] == _CONFLUENT:
        at = 5
    else:
        return None
    for text in (job.job_id, job.queue, job.tenant_id, job.type):
        size = len(text.encode())
        at += _varint_size(size) + size
    at += _varint_size(len(job.payload))
    if value[at : at + len(job.payload)] != job.payload:
        return None
    return at, len(job.payload)


def _varint_size(length: int) -> int:
    """Bytes of an Avro long ``length`` (>= 0) as a zigzag varint."""
    zigzag = length << 1
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


class Switch:
    """Where a producer began writing a tenant's flood to the overflow lane: the ready
    partition and the offset of its last record of the tenant there, and until when
    (epoch ms) the diverted records wait for that partition's commit to pass it."""

    __slots__ = ("deadline_ms", "offset", "partition", "topic")

    def __init__(self, topic: str, partition: int, offset: int, deadline_ms: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.deadline_ms = deadline_ms

    def __repr__(self) -> str:
        return f"Switch({self.topic}/{self.partition}@{self.offset}, until {self.deadline_ms})"


def switch_header(switch: Switch) -> tuple[str, bytes]:
    return (
        H_SWITCH,
        b"%s,%d,%d,%d"
        % (switch.topic.encode(), switch.partition, switch.offset, switch.deadline_ms),
    )


def read_switch(headers: Headers | None) -> Switch | None:
    """The record's switch, or None (none, or one that does not parse: the record is
    then handed out at once, as every record was before switches)."""
    if not headers:
        return None
    raw = dict(headers).get(H_SWITCH)
    if not isinstance(raw, bytes):
        return None
    try:
        # A topic name has no comma (Kafka allows letters, digits, '.', '_', '-').
        topic, partition, offset, deadline = raw.split(b",")
        return Switch(topic.decode(), int(partition), int(offset), int(deadline))
    except ValueError:
        return None
