"""Job results: the one definition of their size cap, encoding and partition.

A handler's return value travels from the worker (which encodes it and checks the
cap) with its ack to the leasekeeper (which checks the cap again, for a worker
configured otherwise, and writes it to ``jobs.Q.results``), and from there to
``JobProducer.result`` (which decodes it). All three import this module, so the
limits, the bytes and the partition a result lands in cannot drift apart.

The partition is the project's own hash of the job id (CRC-32, not Kafka's
murmur2 default partitioner): a reader that knows only the job id reads one
partition, whatever client produced the record.
"""

from __future__ import annotations

import json
import zlib
from typing import Final

__all__ = [
    "DEFAULT_RESULT_BYTES",
    "MAX_RESULT_BYTES",
    "RESULTS_PARTITIONS",
    "RESULT_HEADERS",
    "ResultNotSerialisable",
    "ResultTooLarge",
    "decode_result",
    "encode_result",
    "result_limit",
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
RESULT_HEADERS: Final = (("content-type", b"application/json"),)

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class ResultTooLarge(ValueError):
    """A handler returned more than the result cap: the value belongs in storage."""


class ResultNotSerialisable(TypeError):
    """A handler returned a value JSON cannot carry."""


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


def decode_result(data: bytes) -> object:
    """A result record's value as the handler returned it (JSON types)."""
    return json.loads(data)


def results_partition(job_id: str, partitions: int = RESULTS_PARTITIONS) -> int:
    """The ``jobs.Q.results`` partition of ``job_id``'s result: CRC-32 of its UTF-8 bytes."""
    return zlib.crc32(job_id.encode()) % partitions
