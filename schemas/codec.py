"""Avro single-object encoding of jobs, payloads and dead letters.

Every value this project writes to Kafka is ``C3 01`` + the 8-byte little-endian
CRC-64-AVRO fingerprint of the writer's schema + the Avro binary record. The
fingerprint names the exact schema version that wrote the bytes, so a reader
looks it up in its own :class:`SchemaRegistry` (the ``.avsc`` files it ships
with) and resolves it to the schema it reads with: no registry server, no schema
id allocation, and old and new versions of a record can share a topic.
See ``docs/schemas.md``.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas.job import DeadLetter, Job
from schemas.validation import payload_problem

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "JOB_SCHEMA",
    "MARKER",
    "RESULT_SUFFIX",
    "DecodeError",
    "EnvelopeCodec",
    "PayloadError",
    "SchemaError",
    "SchemaKind",
    "SchemaRegistry",
    "SchemaVersion",
]

MARKER = b"\xc3\x01"
_HEADER = len(MARKER) + 8
JOB_SCHEMA = "leasequeue.Job"
# A job type ``T`` whose handlers return Avro declares the record ``T.result``
# (``schemas/jobs/T.result.avsc`` beside ``T.avsc``): a result schema, never a job type.
RESULT_SUFFIX = ".result"
DEAD_LETTER_SCHEMA = "leasequeue.DeadLetter"
_PACKAGE_DIR = Path(__file__).resolve().parent

_T = TypeVar("_T")


class SchemaError(ValueError):
    """A schema file cannot be loaded, or two files claim the same record name."""


class DecodeError(ValueError):
    """Bytes that are not a record this registry can read; the message says why."""


class PayloadError(ValueError):
    """A payload that does not match its job type's schema; names the type and field."""


class SchemaKind(StrEnum):
    """Where a schema file was found, which decides what it may be used for."""

    SYSTEM = "system"  # envelope and dead letter: schemas/*.avsc
    JOB = "job"  # a job type's payload: schemas/jobs/*.avsc or a JOBS_SCHEMA_PATH entry
    HISTORY = "history"  # an older version: read old bytes with it, never write with it


@dataclass(frozen=True, kw_only=True)
class SchemaVersion:
    """One schema file, parsed, with the fingerprint that identifies it in encoded bytes."""

    name: str
    fingerprint: bytes
    schema: dict[str, Any]
    path: Path
    kind: SchemaKind

    @classmethod
    def load(cls, path: Path, kind: SchemaKind) -> SchemaVersion:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            # A fresh namespace per file: versions of one name must not collide.
            parsed = fastavro.parse_schema(raw, named_schemas={})
        except Exception as exc:
            raise SchemaError(f"{path}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            raise SchemaError(f"{path}: the top-level schema must be a record")
        canonical = to_parsing_canonical_form(parsed)
        digest = bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))
        return cls(name=parsed["name"], fingerprint=digest, schema=parsed, path=path, kind=kind)


class SchemaRegistry:
    """Every schema this process can read or write, by full name and by fingerprint.

    Loads ``*.avsc`` from the package (``schemas/``, ``schemas/jobs/``,
    ``schemas/history/``) and from each of ``extra_dirs`` (job types, plus its
    ``history/``). A name has one current file, its reader and writer schema;
    files under ``history/`` are older versions kept only so that bytes they
    wrote still decode. ``base_dir`` replaces the package directory (tests).
    """

    def __init__(
        self,
        extra_dirs: Iterable[str | os.PathLike[str]] = (),
        *,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        base = Path(base_dir) if base_dir is not None else _PACKAGE_DIR
        self._current: dict[str, SchemaVersion] = {}
        self._by_fingerprint: dict[bytes, SchemaVersion] = {}
        self._load_dir(base, SchemaKind.SYSTEM, required=True)
        self._load_dir(base / "jobs", SchemaKind.JOB, required=False)
        self._load_dir(base / "history", SchemaKind.HISTORY, required=False)
        for extra in extra_dirs:
            self._load_dir(Path(extra), SchemaKind.JOB, required=True)
            self._load_dir(Path(extra) / "history", SchemaKind.HISTORY, required=False)

    def _load_dir(self, directory: Path, kind: SchemaKind, *, required: bool) -> None:
        if not directory.is_dir():
            if required:
                raise SchemaError(f"schema directory {directory} does not exist")
            return
        for path in sorted(directory.glob("*.avsc")):
            self._add(SchemaVersion.load(path, kind))

    def _add(self, version: SchemaVersion) -> None:
        if version.kind is not SchemaKind.HISTORY:
            if version.kind is SchemaKind.JOB and version.path.stem != version.name:
                raise SchemaError(
                    f"{version.path}: a job type's file must be named {version.name}.avsc"
                )
            current = self._current.setdefault(version.name, version)
            if current.fingerprint != version.fingerprint:
                raise SchemaError(
                    f"{version.name} is defined by both {current.path} and {version.path}; "
                    "move the older version under a history/ directory"
                )
        # A history file identical to a current one adds nothing; keep the first.
        self._by_fingerprint.setdefault(version.fingerprint, version)

    def __contains__(self, name: object) -> bool:
        return name in self._current

    def close(self) -> None:
        """Release connections (registry mode holds an HTTP client); nothing to do here."""

    def names(self) -> list[str]:
        """Every record name with a current schema, sorted."""
        return sorted(self._current)

    def payload_types(self) -> list[str]:
        """The job types a producer may enqueue, sorted (result schemas are not)."""
        return sorted(
            n
            for n, v in self._current.items()
            if v.kind is SchemaKind.JOB and not n.endswith(RESULT_SUFFIX)
        )

    def current(self, name: str) -> SchemaVersion:
        """The version of ``name`` that is written and read into."""
        try:
            return self._current[name]
        except KeyError:
            raise SchemaError(f"no schema named {name!r}") from None

    def versions(self, name: str) -> list[SchemaVersion]:
        """Every known version of ``name`` (current and history)."""
        return [v for v in self._by_fingerprint.values() if v.name == name]

    def writer_of(self, data: bytes | None) -> SchemaVersion:
        """The schema version that wrote ``data``, from its single-object header."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"expected bytes, got {type(data).__name__}")
        if len(data) < _HEADER:
            raise DecodeError(f"{len(data)} bytes is shorter than the {_HEADER}-byte header")
        if bytes(data[:2]) != MARKER:
            raise DecodeError(f"not single-object encoded: marker {bytes(data[:2]).hex()} != c301")
        found = self._by_fingerprint.get(bytes(data[2:_HEADER]))
        if found is None:
            raise DecodeError(
                f"unknown schema fingerprint {bytes(data[2:_HEADER]).hex()}: deploy the writer's "
                ".avsc (schemas/history/ or JOBS_SCHEMA_PATH) to this reader"
            )
        return found

    def encode(self, name: str, record: Mapping[str, object], *, topic: str | None = None) -> bytes:
        """``record`` in single-object encoding with the current schema of ``name``.

        ``topic`` (where the bytes go) names the subject in registry mode; unused here.
        """
        version = self.current(name)
        out = io.BytesIO()
        out.write(MARKER + version.fingerprint)
        try:
            fastavro.schemaless_writer(out, version.schema, record)
        except Exception as exc:
            raise ValueError(f"cannot encode {name}: {type(exc).__name__}: {exc}") from exc
        return out.getvalue()

    def decode(self, data: bytes | None, *, expect: str) -> dict[str, Any]:
        """Decode an ``expect`` record, resolving the writer's version to the current one.

        ``None`` (a Kafka record without a value) is accepted and is a DecodeError.
        """
        if data is None:
            raise DecodeError("expected bytes, got NoneType (a record without a value)")
        writer = self.writer_of(data)
        if writer.name != expect:
            raise DecodeError(f"the bytes hold a {writer.name} record, expected {expect}")
        reader = self._current.get(expect, writer)
        source = io.BytesIO(data)
        source.seek(_HEADER)
        try:
            record = fastavro.schemaless_reader(
                source, writer.schema, None if reader is writer else reader.schema
            )
        except Exception as exc:
            raise DecodeError(
                f"{expect} (schema {writer.fingerprint.hex()}) is corrupt or truncated: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if source.tell() != len(data):
            raise DecodeError(f"{len(data) - source.tell()} bytes left after the {expect} record")
        if not isinstance(record, dict):
            raise DecodeError(f"{expect} did not decode to a record")
        return record


class EnvelopeCodec:
    """Bytes on the queue topics <-> :class:`Job`, :class:`DeadLetter` and payloads."""

    def __init__(self, registry: SchemaRegistry) -> None:
        for name in (JOB_SCHEMA, DEAD_LETTER_SCHEMA):
            if name not in registry:
                raise SchemaError(f"the registry has no {name} schema")
        self.registry = registry

    def encode(self, job: Job) -> bytes:
        return self.registry.encode(JOB_SCHEMA, job.to_avro())

    def decode(self, data: bytes | None) -> Job:
        return _typed(Job.from_avro, self.registry.decode(data, expect=JOB_SCHEMA), JOB_SCHEMA)

    def encode_dead_letter(self, letter: DeadLetter, *, topic: str | None = None) -> bytes:
        """``topic`` is the DLQ topic: a registry names the dead letter's subject by it."""
        return self.registry.encode(DEAD_LETTER_SCHEMA, letter.to_avro(), topic=topic)

    def decode_dead_letter(self, data: bytes | None) -> DeadLetter:
        record = self.registry.decode(data, expect=DEAD_LETTER_SCHEMA)
        return _typed(DeadLetter.from_avro, record, DEAD_LETTER_SCHEMA)

    def validate_payload(self, type: str, payload: Mapping[str, object]) -> None:
        """Raise :class:`PayloadError` unless ``payload`` fits job type ``type``."""
        registry = self.registry
        # Looked up, not listed: every enqueue asks, and the list is only for the error.
        version = registry.current(type) if type in registry else None
        if version is None or version.kind is not SchemaKind.JOB or type.endswith(RESULT_SUFFIX):
            known = registry.payload_types()
            raise PayloadError(
                f"no schema for job type {type!r} (known: {', '.join(known) or 'none'}); "
                f"add schemas/jobs/{type}.avsc or a directory on JOBS_SCHEMA_PATH"
            )
        problem = payload_problem(version.schema, payload)
        if problem is not None:
            raise PayloadError(f"{type} payload: {problem}")

    def encode_payload(self, type: str, payload: Mapping[str, object]) -> bytes:
        """The validated payload, single-object encoded for ``Job.payload``."""
        self.validate_payload(type, payload)
        return self.registry.encode(type, payload)

    def decode_payload(self, type: str, data: bytes | None) -> dict[str, Any]:
        return self.registry.decode(data, expect=type)

    def result_schema(self, type: str) -> SchemaVersion | None:
        """The schema job type ``type``'s return values are written with, if it has one
        (``T.result``); None: they are JSON."""
        name = type + RESULT_SUFFIX
        return self.registry.current(name) if name in self.registry else None


def _typed(build: Callable[[Mapping[str, object]], _T], record: dict[str, Any], name: str) -> _T:
    """Build the dataclass; a record that does not fit it is undecodable, not a crash."""
    try:
        return build(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"{name} record does not fit its class: {exc}") from exc
