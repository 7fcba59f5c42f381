"""The Confluent wire format against a Schema Registry, beside single-object encoding.

Tools that teams already run (kcat ``-s avro``, Kafka Connect, ksqlDB, Flink, a
registry's UI) read ``00`` + a 4-byte big-endian schema id + the Avro binary
record, and find the writer's schema by that id in a Schema Registry (Confluent,
Apicurio, Karapace...). :class:`ConfluentSchemaRegistry` writes that format and
reads both it and single-object encoding (a record is told apart by its first
byte), so a queue moves from the file registry to a registry without draining.

The local ``.avsc`` files stay the reader's schemas and the writer's source of
truth. Writing needs the id the registry gave the current schema; the runtime
never registers (``producer schemas register`` does, in a deploy pipeline), so an
unregistered schema is an error at start-up, not a surprise later. Ids and the
schemas they name are cached in memory and on disk, so a process restarted while
the registry is down still reads and writes with the schemas it has seen.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from schemas.codec import (
    DEAD_LETTER_SCHEMA,
    JOB_SCHEMA,
    DecodeError,
    SchemaError,
    SchemaKind,
    SchemaRegistry,
    SchemaVersion,
)

__all__ = [
    "WIRE_MAGIC",
    "ConfluentSchemaRegistry",
    "RegistryClient",
    "RegistryUnavailable",
    "SchemaCache",
    "SchemaUnavailable",
    "SubjectStrategy",
    "subject_for",
]

log = logging.getLogger(__name__)

WIRE_MAGIC = b"\x00"
_HEADER = 5


class RegistryUnavailable(ConnectionError):
    """The registry did not answer (down, unreachable): worth retrying later."""


class SchemaUnavailable(Exception):
    """The writer's schema is neither cached nor obtainable now (the registry is down):
    the bytes may be fine, so this is not a DecodeError; try again later."""


class SubjectStrategy(StrEnum):
    """How a schema's subject is named, as the Confluent serializers name them."""

    TOPIC_NAME = "TopicName"  # <topic>-value; payloads: job.<type>
    RECORD_NAME = "RecordName"  # the record's full name
    TOPIC_RECORD_NAME = "TopicRecordName"  # <topic>-<record full name>

    @classmethod
    def parse(cls, text: str) -> SubjectStrategy:
        """``TopicName``, ``TopicNameStrategy`` or a serializer's full class name."""
        short = text.rsplit(".", 1)[-1].removesuffix("Strategy")
        for strategy in cls:
            if strategy.value.lower() == short.lower():
                return strategy
        known = ", ".join(s.value for s in cls)
        raise ValueError(f"unknown subject name strategy {text!r} (known: {known})")


def subject_for(strategy: SubjectStrategy, *, record: str, topic: str | None) -> str:
    """The subject of ``record`` written to ``topic`` (None for a payload, which has no
    topic of its own: its "topic" is ``job.<type>``)."""
    if topic is None:
        if strategy is SubjectStrategy.RECORD_NAME:
            return record
        return f"job.{record}" if strategy is SubjectStrategy.TOPIC_NAME else f"job-{record}"
    if strategy is SubjectStrategy.TOPIC_NAME:
        return f"{topic}-value"
    if strategy is SubjectStrategy.RECORD_NAME:
        return record
    return f"{topic}-{record}"


class RegistryClient(Protocol):
    """The registry calls this codec needs; ``jobcore.schema_registry`` adapts the
    ``confluent_kafka`` client to it, and unit tests pass a fake. Every method raises
    RegistryUnavailable when the registry does not answer."""

    def schema_by_id(self, schema_id: int) -> str: ...
    def id_of(self, subject: str, schema: str) -> int | None: ...
    def close(self) -> None: ...


class SchemaCache:
    """Ids and schemas on disk: ``ids/<id>.avsc`` (a registry never changes what an id
    names) and ``subjects/<digest>.json`` (the id of a schema under a subject)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def schema(self, schema_id: int) -> str | None:
        return self._read(Path("ids") / f"{schema_id}.avsc")

    def put_schema(self, schema_id: int, schema: str) -> None:
        self._write(Path("ids") / f"{schema_id}.avsc", schema)

    def schema_id(self, subject: str, fingerprint: bytes) -> int | None:
        text = self._read(self._subject_path(subject, fingerprint))
        return None if text is None else int(json.loads(text)["id"])

    def put_schema_id(self, subject: str, fingerprint: bytes, schema_id: int) -> None:
        record = {"subject": subject, "fingerprint": fingerprint.hex(), "id": schema_id}
        self._write(self._subject_path(subject, fingerprint), json.dumps(record))

    @staticmethod
    def _subject_path(subject: str, fingerprint: bytes) -> Path:
        digest = hashlib.sha256(subject.encode() + b"\0" + fingerprint).hexdigest()[:32]
        return Path("subjects") / f"{digest}.json"

    def _read(self, relative: Path) -> str | None:
        if self.directory is None:
            return None
        try:
            return (self.directory / relative).read_text(encoding="utf-8")
        except OSError:
            return None

    def _write(self, relative: Path, text: str) -> None:
        """Atomic (temp file + rename), so a crash never leaves half a schema behind."""
        if self.directory is None:
            return
        target = self.directory / relative
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, target)
        except OSError as exc:  # a cache that cannot be written only costs lookups later
            log.warning("cannot write the schema cache %s: %s", target, exc)


@dataclass(frozen=True, kw_only=True)
class _Writer:
    """A schema id the registry gave one of our current schemas."""

    schema_id: int
    version: SchemaVersion


@dataclass(frozen=True, kw_only=True)
class _IdSchema:
    """A writer schema fetched by id, ready to read with."""

    name: str
    schema: dict[str, Any]


def schema_text(version: SchemaVersion) -> str:
    """The schema as registered: the ``.avsc`` file's JSON, compacted."""
    raw = json.loads(version.path.read_text(encoding="utf-8"))
    return json.dumps(raw, separators=(",", ":"))


class ConfluentSchemaRegistry(SchemaRegistry):
    """A :class:`SchemaRegistry` that writes the Confluent wire format.

    ``prefix`` names the envelope's topic (``<prefix>.<queue>``) for the topic-based
    subject strategies; retry tiers carry the same envelope under the ready
    topic's subject. Dead letters need ``topic=`` (the DLQ topic) when encoded.
    """

    def __init__(
        self,
        client: RegistryClient,
        extra_dirs: Iterable[str | os.PathLike[str]] = (),
        *,
        prefix: str = "jobs",
        strategy: SubjectStrategy = SubjectStrategy.TOPIC_NAME,
        cache_dir: Path | None = None,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(extra_dirs, base_dir=base_dir)
        self.client = client
        self.prefix = prefix
        self.strategy = strategy
        self.cache = SchemaCache(cache_dir)
        self._writers: dict[str, _Writer] = {}
        self._by_id: dict[int, _IdSchema] = {}

    def close(self) -> None:
        self.client.close()

    def subject(self, name: str, *, topic: str | None = None) -> str:
        """The subject ``name`` is registered under (``topic``: where it is written)."""
        version = self.current(name)
        if version.kind is SchemaKind.SYSTEM and topic is None:
            raise SchemaError(f"{name} needs its topic to name its subject")
        return subject_for(self.strategy, record=name, topic=topic)

    def envelope_topic(self, queue: str) -> str:
        return f"{self.prefix}.{queue}"

    def writer_id(self, name: str, *, topic: str | None = None) -> int:
        """The registry's id for the current schema of ``name``: memory, disk, registry.

        Raises SchemaError when the registry does not know the schema (register it
        first) and RegistryUnavailable when it cannot be asked and nothing is cached.
        """
        subject = self.subject(name, topic=topic)
        found = self._writers.get(subject)
        if found is not None:
            return found.schema_id
        version = self.current(name)
        schema_id = self.cache.schema_id(subject, version.fingerprint)
        if schema_id is None:
            schema_id = self.client.id_of(subject, schema_text(version))
            if schema_id is None:
                raise SchemaError(
                    f"{name} ({version.path.name}) is not registered under subject {subject!r}; "
                    "run `producer schemas register` before starting"
                )
            self.cache.put_schema_id(subject, version.fingerprint, schema_id)
            self.cache.put_schema(schema_id, schema_text(version))  # a reader's, later
        self._writers[subject] = _Writer(schema_id=schema_id, version=version)
        self._by_id.setdefault(schema_id, _IdSchema(name=name, schema=version.schema))
        return schema_id

    def encode(self, name: str, record: Mapping[str, object], *, topic: str | None = None) -> bytes:
        if topic is None and name == JOB_SCHEMA:
            topic = self.envelope_topic(str(record.get("queue")))
        schema_id = self.writer_id(name, topic=topic)
        out = io.BytesIO()
        out.write(WIRE_MAGIC + schema_id.to_bytes(4, "big"))
        try:
            fastavro.schemaless_writer(out, self.current(name).schema, record)
        except Exception as exc:
            raise ValueError(f"cannot encode {name}: {type(exc).__name__}: {exc}") from exc
        return out.getvalue()

    def decode(self, data: bytes | None, *, expect: str) -> dict[str, Any]:
        if data is None or bytes(data[:1]) != WIRE_MAGIC:
            return super().decode(data, expect=expect)
        if len(data) < _HEADER:
            raise DecodeError(f"{len(data)} bytes is shorter than the {_HEADER}-byte header")
        writer = self._schema_of(int.from_bytes(data[1:_HEADER], "big"))
        if writer.name != expect:
            raise DecodeError(f"the bytes hold a {writer.name} record, expected {expect}")
        return self._read(data, writer, expect)

    def _read(self, data: bytes, writer: _IdSchema, expect: str) -> dict[str, Any]:
        reader = self.current(expect).schema if expect in self else writer.schema
        source = io.BytesIO(data)
        source.seek(_HEADER)
        try:
            record = fastavro.schemaless_reader(
                source, writer.schema, None if reader is writer.schema else reader
            )
        except Exception as exc:
            raise DecodeError(
                f"{expect} is corrupt or truncated: {type(exc).__name__}: {exc}"
            ) from exc
        if source.tell() != len(data):
            raise DecodeError(f"{len(data) - source.tell()} bytes left after the {expect} record")
        if not isinstance(record, dict):
            raise DecodeError(f"{expect} did not decode to a record")
        return record

    def _schema_of(self, schema_id: int) -> _IdSchema:
        """The writer's schema by id: memory, then disk, then the registry (cached)."""
        found = self._by_id.get(schema_id)
        if found is not None:
            return found
        text = self.cache.schema(schema_id)
        if text is None:
            try:
                text = self.client.schema_by_id(schema_id)
            except RegistryUnavailable as exc:
                raise SchemaUnavailable(
                    f"schema id {schema_id} is not cached and the registry is unreachable: {exc}"
                ) from exc
            self.cache.put_schema(schema_id, text)
        found = _parse_by_id(schema_id, text)
        current = self._current.get(found.name)
        if current is not None and current.fingerprint == _fingerprint(found.schema):
            found = _IdSchema(name=found.name, schema=current.schema)
        self._by_id[schema_id] = found
        return found

    def preflight(self, names: Iterable[tuple[str, str | None]]) -> None:
        """Resolve the ids of ``(name, topic)`` pairs now, so a missing registration
        fails at start-up and later writes need no registry round trip."""
        for name, topic in names:
            self.writer_id(name, topic=topic)

    def queue_subjects(self, queue: str) -> list[tuple[str, str | None]]:
        """Every ``(name, topic)`` a queue writes: envelope, dead letter, payloads."""
        ready = self.envelope_topic(queue)
        pairs: list[tuple[str, str | None]] = [
            (JOB_SCHEMA, ready),
            (DEAD_LETTER_SCHEMA, f"{ready}.dlq"),
        ]
        return pairs + [(t, None) for t in self.payload_types()]


def _parse_by_id(schema_id: int, text: str) -> _IdSchema:
    try:
        parsed = fastavro.parse_schema(json.loads(text), named_schemas={})
    except Exception as exc:
        raise DecodeError(f"schema id {schema_id} is not a usable Avro schema: {exc}") from exc
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise DecodeError(f"schema id {schema_id} is not an Avro record schema")
    return _IdSchema(name=str(parsed["name"]), schema=parsed)


def _fingerprint(schema: dict[str, Any]) -> bytes:
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
