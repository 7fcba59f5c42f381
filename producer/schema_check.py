"""Compatibility before shipping: compare local ``.avsc`` files with what readers know.

In registry mode the previous versions are the subject's registered ones; in the
file-registry mode they are the files under ``history/``. Payload subjects are
held to FULL_TRANSITIVE by default (old readers read new payloads and new readers
old ones, which rolling deploys need); envelope and dead-letter subjects to the
level the registry reports for them (BACKWARD in file mode).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from schemas.codec import SchemaKind, SchemaRegistry, SchemaVersion
from schemas.compat import CompatibilityLevel, incompatibilities
from schemas.confluent import ConfluentSchemaRegistry, schema_text

__all__ = [
    "PAYLOAD_LEVEL",
    "CheckOutcome",
    "CheckResult",
    "ShippingClient",
    "check_files",
    "check_registry",
    "register_all",
]

PAYLOAD_LEVEL = CompatibilityLevel.FULL_TRANSITIVE
_SYSTEM_LEVEL = CompatibilityLevel.BACKWARD


class CheckOutcome(StrEnum):
    OK = "ok"
    UNCHANGED = "unchanged"  # already registered, exactly this schema
    NEW = "new"  # no earlier version to compare with
    REGISTERED = "registered"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One subject's verdict; ``problems`` name the fields at fault."""

    name: str
    subject: str
    level: CompatibilityLevel
    outcome: CheckOutcome
    previous: int = 0
    problems: tuple[str, ...] = ()

    def line(self) -> str:
        head = (
            f"{self.outcome.value:<12} {self.subject} ({self.level.value}, {self.previous} earlier)"
        )
        return "\n".join([head, *(f"    {p}" for p in self.problems)])


class ShippingClient(Protocol):
    """The deploy-time registry calls (``jobcore.schema_registry.ConfluentRegistryClient``)."""

    def id_of(self, subject: str, schema: str) -> int | None: ...
    def register(self, subject: str, schema: str) -> int: ...
    def versions(self, subject: str) -> list[str]: ...
    def compatibility(self, subject: str) -> str | None: ...
    def set_compatibility(self, subject: str, level: str) -> None: ...
    def is_compatible(self, subject: str, schema: str) -> bool: ...


def _raw(version: SchemaVersion) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(version.path.read_text(encoding="utf-8"))
    return loaded


def _verdict(
    *, name: str, subject: str, level: CompatibilityLevel, new: Any, previous: Sequence[Any]
) -> CheckResult:
    problems = incompatibilities(new, previous, level)
    outcome = (
        CheckOutcome.INCOMPATIBLE if problems else CheckOutcome.OK if previous else CheckOutcome.NEW
    )
    return CheckResult(
        name=name,
        subject=subject,
        level=level,
        outcome=outcome,
        previous=len(previous),
        problems=tuple(problems),
    )


def check_files(registry: SchemaRegistry) -> list[CheckResult]:
    """Each current schema against its ``history/`` versions (the file-registry mode)."""
    results = []
    for name in sorted(registry.names()):
        current = registry.current(name)
        level = PAYLOAD_LEVEL if current.kind is SchemaKind.JOB else _SYSTEM_LEVEL
        older = [_raw(v) for v in registry.versions(name) if v.kind is SchemaKind.HISTORY]
        results.append(
            _verdict(name=name, subject=name, level=level, new=_raw(current), previous=older)
        )
    return results


def check_registry(
    registry: ConfluentSchemaRegistry, client: ShippingClient, queues: Iterable[str]
) -> list[CheckResult]:
    """Each schema a queue writes against its subject's registered versions."""
    results = []
    for name, topic in _pairs(registry, queues):
        subject = registry.subject(name, topic=topic)
        version = registry.current(name)
        level = _level(version, client.compatibility(subject))
        if client.id_of(subject, schema_text(version)) is not None:
            results.append(
                CheckResult(name=name, subject=subject, level=level, outcome=CheckOutcome.UNCHANGED)
            )
            continue
        previous = [json.loads(text) for text in client.versions(subject)]
        result = _verdict(
            name=name, subject=subject, level=level, new=_raw(version), previous=previous
        )
        if result.outcome is CheckOutcome.OK and not client.is_compatible(
            subject, schema_text(version)
        ):
            problem = f"the registry refuses it at the subject's level ({level.value})"
            result = CheckResult(
                name=name,
                subject=subject,
                level=level,
                outcome=CheckOutcome.INCOMPATIBLE,
                previous=result.previous,
                problems=(problem,),
            )
        results.append(result)
    return results


def register_all(
    registry: ConfluentSchemaRegistry, client: ShippingClient, results: Iterable[CheckResult]
) -> list[CheckResult]:
    """Register every checked schema that is not registered yet (call only when none is
    incompatible); a new payload subject gets FULL_TRANSITIVE as its own level."""
    done = []
    for result in results:
        if result.outcome is CheckOutcome.UNCHANGED:
            done.append(result)
            continue
        version = registry.current(result.name)
        if result.outcome is CheckOutcome.NEW and version.kind is SchemaKind.JOB:
            client.set_compatibility(result.subject, PAYLOAD_LEVEL.value)
        client.register(result.subject, schema_text(version))
        done.append(
            CheckResult(
                name=result.name,
                subject=result.subject,
                level=result.level,
                outcome=CheckOutcome.REGISTERED,
                previous=result.previous,
            )
        )
    return done


def _level(version: SchemaVersion, reported: str | None) -> CompatibilityLevel:
    if version.kind is SchemaKind.JOB:
        return PAYLOAD_LEVEL
    try:
        return CompatibilityLevel(reported) if reported else _SYSTEM_LEVEL
    except ValueError:
        return _SYSTEM_LEVEL


def _pairs(
    registry: ConfluentSchemaRegistry, queues: Iterable[str]
) -> list[tuple[str, str | None]]:
    """Every (name, topic) to check: each queue's envelope and dead letter, payloads once."""
    pairs: dict[tuple[str, str | None], None] = {}
    for queue in queues:
        for pair in registry.queue_subjects(queue):
            pairs[pair] = None
    for payload in registry.payload_types():
        pairs[(payload, None)] = None
    return list(pairs)
