"""Job results: the one definition of their size cap, encoding and partition.

A handler's return value travels from the worker (which encodes it and checks the
cap) with its ack to the leasekeeper (which checks the cap again, for a worker
configured otherwise, and writes it to ``jobs.Q.results``), and from there to
``JobProducer.result`` (which decodes it). All three import this module, so the
limits, the bytes and the partition a result lands in cannot drift apart.

A value is UTF-8 JSON, or Avro when its job type declares a result schema
(``T.result``, see ``schemas.codec.RESULT_SUFFIX``): then it is checked against the
schema as a payload is, and written in the single-object encoding every other
record uses (``C3 01`` + the schema's fingerprint), which no JSON text starts with.
So a reader tells the two apart by the bytes alone, and the record's
``content-type`` header says the same for readers of other languages.

The partition is the project's own hash of the job id (CRC-32, not Kafka's
murmur2 default partitioner): a reader that knows only the job id reads one
partition, whatever client produced the record.
"""

from __future__ import annotations

import io
import json
import zlib
from typing import Any, Final

import fastavro

from schemas.codec import MARKER, DecodeError, EnvelopeCodec, SchemaRegistry
from schemas.validation import payload_problem

__all__ = [
    "DEFAULT_RESULT_BYTES",
    "MAX_RESULT_BYTES",
    "RESULTS_PARTITIONS",
    "ResultEncoder",
    "ResultNotSerialisable",
    "ResultTooLarge",
    "ResultUndecodable",
    "decode_result",
    "encode_result",
    "result_headers",
    "result_limit",
    "result_text",
    "results_partition",
]

# A result is an answer, not a payload store: 4 KiB fits a URL, a key, a few
# numbers. Raised at most to 64 KiB, so results never crowd the topic's batches.
DEFAULT_RESULT_BYTES: Final = 4 * 1024
MAX_RESULT_BYTES: Final = 64 * 1024
# ``jobs.Q.results`` partitions: the result reads of one queue spread over them,
# and one reader fetches only its job's partition.
RESULTS_PARTITIONS: Final = 8

# A result record's headers: how its value is encoded, for readers of other languages.
_JSON_HEADERS: Final = (("content-type", b"application/json"),)
_AVRO_HEADERS: Final = (("content-type", b"application/avro; encoding=single-object"),)

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class ResultTooLarge(ValueError):
    """A handler returned more than the result cap: the value belongs in storage."""


class ResultNotSerialisable(TypeError):
    """A handler returned a value JSON (or its type's result schema) cannot carry."""


class ResultUndecodable(ValueError):
    """A result's bytes this reader cannot read: Avro by a schema it does not have."""


def result_limit(limit: int) -> int:
    """``limit`` checked as a result cap (bytes), for worker options and leasekeeper flags."""
    if not 1 <= limit <= MAX_RESULT_BYTES:
        raise ValueError(
            f"result size limit must be between 1 and {MAX_RESULT_BYTES} bytes (64 KiB), "
            f"got {limit}: store larger values elsewhere and return a reference"
        )
    return limit


def too_large_message(job_type: str, size: int, limit: int) -> str:
    """Said wherever a result is refused for its size (worker and leasekeeper alike)."""
    return (
        f"the result of job type {job_type!r} is {size} bytes encoded, over the {limit}-byte "
        "result limit: store the value elsewhere (a bucket, a database) and return a "
        "reference to it (its key or URL)"
    )


def encode_result(value: object, job_type: str, limit: int = DEFAULT_RESULT_BYTES) -> bytes:
    """A handler's return value as the bytes sent with its ack (UTF-8 JSON). Raises
    ``ResultNotSerialisable`` or ``ResultTooLarge``, each saying what to return instead.
    Never called for ``None``: that is no result, and costs nothing."""
    try:
        data = _encoder.encode(value).encode()
    except (TypeError, ValueError) as exc:
        raise ResultNotSerialisable(
            f"the handler of job type {job_type!r} returned a value JSON cannot carry ({exc}): "
            "return None, or a str, number, bool, list or dict of those"
        ) from None
    if len(data) > limit:
        raise ResultTooLarge(too_large_message(job_type, len(data), limit))
    return data


class ResultEncoder:
    """How a worker turns its handlers' return values into the bytes of their acks: JSON,
    or Avro for a job type whose result schema ``codec`` holds; at most ``limit`` bytes.
    """

    __slots__ = ("_codec", "limit")

    def __init__(
        self, limit: int = DEFAULT_RESULT_BYTES, codec: EnvelopeCodec | None = None
    ) -> None:
        self.limit = result_limit(limit)
        self._codec = codec

    @classmethod
    def of(cls, decoder: object, limit: int = DEFAULT_RESULT_BYTES) -> ResultEncoder:
        """The encoder of a worker whose payloads ``decoder`` reads: with its result
        schemas when it is the project's codec (a test's fake decoder has none)."""
        return cls(limit, decoder if isinstance(decoder, EnvelopeCodec) else None)

    def encode(self, value: object, job_type: str) -> bytes:
        """Raises ``ResultNotSerialisable`` or ``ResultTooLarge``, each saying what to
        return instead. Never called for ``None``: that is no result, and costs nothing."""
        schema = None if self._codec is None else self._codec.result_schema(job_type)
        if schema is None:
            return encode_result(value, job_type, self.limit)
        problem = payload_problem(schema.schema, value)
        if problem is not None:
            raise ResultNotSerialisable(
                f"the handler of job type {job_type!r} returned a value its result schema "
                f"{schema.name} refuses: {problem}"
            )
        out = io.BytesIO()
        out.write(MARKER + schema.fingerprint)
        try:
            fastavro.schemaless_writer(out, schema.schema, value)
        except (TypeError, ValueError, AttributeError) as exc:
            raise ResultNotSerialisable(
                f"the handler of job type {job_type!r} returned a value its result schema "
                f"{schema.name} cannot write: {exc}"
            ) from None
        data = out.getvalue()
        if len(data) > self.limit:
            raise ResultTooLarge(too_large_message(job_type, len(data), self.limit))
        return data


def result_headers(data: bytes) -> tuple[tuple[str, bytes], ...]:
    """The headers of a result record holding ``data``: its content type."""
    return _AVRO_HEADERS if data[:2] == MARKER else _JSON_HEADERS


def decode_result(data: bytes, registry: SchemaRegistry | None = None) -> object:
    """A result record's value as the handler returned it: JSON types, or the record an
    Avro result decodes to with ``registry`` (which must hold its writer's schema)."""
    if data[:2] != MARKER:
        return json.loads(data)
    if registry is None:
        raise ResultUndecodable(
            "the result is Avro (a job type with a result schema): read it with the "
            "registry that holds that schema (JobProducer(registry=...), --schema-path)"
        )
    try:
        writer = registry.writer_of(data)
        return registry.decode(data, expect=writer.name)
    except DecodeError as exc:
        raise ResultUndecodable(f"the result is Avro this reader cannot read: {exc}") from None


def result_text(data: bytes, registry: SchemaRegistry | None = None) -> str:
    """A result as JSON text, for people and for ``/api/job``: JSON as written; Avro
    decoded (bytes fields as text), or a note naming the schema when it cannot be."""
    if data[:2] != MARKER:
        return data.decode(errors="replace")
    try:
        value: Any = decode_result(data, registry)
    except ResultUndecodable:
        return f"(an Avro result by schema {data[2:10].hex()}, not known to this reader)"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def results_partition(job_id: str, partitions: int = RESULTS_PARTITIONS) -> int:
    """The ``jobs.Q.results`` partition of ``job_id``'s result: CRC-32 of its UTF-8 bytes."""
    return zlib.crc32(job_id.encode()) % partitions
