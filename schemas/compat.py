"""Avro schema compatibility, checked before a schema ships.

Rolling deploys run old and new code side by side, so a payload written by one
must be readable by the other: the project's rule is FULL_TRANSITIVE (every
version reads every other). The same rules a Schema Registry applies are
implemented here, so the file-registry mode (``schemas/history/``) gets the same
protection and a refusal names the fields at fault rather than just "incompatible".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

__all__ = ["CompatibilityLevel", "incompatibilities", "read_problems"]

# Writer type -> reader types it may be promoted to (Avro specification, schema resolution).
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class CompatibilityLevel(StrEnum):
    """The Schema Registry vocabulary for which versions must read which."""

    NONE = "NONE"
    BACKWARD = "BACKWARD"  # the new schema reads data of the latest one
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"  # ... of every earlier one
    FORWARD = "FORWARD"  # the latest schema reads data of the new one
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"  # both directions, with the latest
    FULL_TRANSITIVE = "FULL_TRANSITIVE"  # both directions, with every earlier one

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


def incompatibilities(
    new: Mapping[str, Any], previous: Sequence[Mapping[str, Any]], level: CompatibilityLevel
) -> list[str]:
    """Why ``new`` may not follow ``previous`` (oldest first) at ``level``; empty if it may."""
    if level is CompatibilityLevel.NONE or not previous:
        return []
    olds = list(previous) if level.transitive else [previous[-1]]
    problems: list[str] = []
    for old in olds:
        if level.backward:
            problems += [f"new readers of old data: {p}" for p in read_problems(new, old)]
        if level.forward:
            problems += [f"old readers of new data: {p}" for p in read_problems(old, new)]
    return list(dict.fromkeys(problems))


def read_problems(reader: Any, writer: Any, path: str = "") -> list[str]:
    """What stops ``reader`` from reading data written with ``writer``; each names a field."""
    reader, writer = _unwrap(reader), _unwrap(writer)
    if isinstance(writer, list):
        return [p for branch in writer for p in _union_reads(reader, branch, path)]
    if isinstance(reader, list):
        return _union_reads(reader, writer, path)
    r_type, w_type = _type_name(reader), _type_name(writer)
    if r_type != w_type:
        if r_type in _PROMOTIONS.get(w_type, frozenset()):
            return []
        return [f"{_where(path)}: {w_type} cannot be read as {r_type}"]
    if r_type == "record":
        return _record_reads(reader, writer, path)
    if r_type == "enum":
        return _enum_reads(reader, writer, path)
    if r_type == "array":
        return read_problems(reader["items"], writer["items"], f"{path}[]")
    if r_type == "map":
        return read_problems(reader["values"], writer["values"], f"{path}{{}}")
    if r_type == "fixed" and reader.get("size") != writer.get("size"):
        return [f"{_where(path)}: fixed size {writer.get('size')} != {reader.get('size')}"]
    return []


def _record_reads(reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> list[str]:
    written = {f["name"]: f for f in writer.get("fields", [])}
    problems: list[str] = []
    for field in reader.get("fields", []):
        name = f"{path}.{field['name']}" if path else field["name"]
        source = written.get(field["name"])
        if source is None:
            for alias in field.get("aliases", []):
                source = written.get(alias, source)
        if source is None:
            if "default" not in field:
                problems.append(f"field '{name}' is missing from the data and has no default")
            continue
        problems += read_problems(field["type"], source["type"], name)
    return problems


def _enum_reads(reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> list[str]:
    missing = [s for s in writer.get("symbols", []) if s not in reader.get("symbols", [])]
    if not missing or "default" in reader:
        return []
    return [f"{_where(path)}: enum symbols {', '.join(missing)} unknown to the reader"]


def _union_reads(reader: Any, writer_branch: Any, path: str) -> list[str]:
    """A written branch must be readable by the reader (or one of its branches)."""
    branches = reader if isinstance(reader, list) else [reader]
    for branch in branches:
        if not read_problems(branch, writer_branch, path):
            return []
    return [
        f"{_where(path)}: {_type_name(_unwrap(writer_branch))} cannot be read as "
        f"{' | '.join(_type_name(_unwrap(b)) for b in branches)}"
    ]


def _unwrap(schema: Any) -> Any:
    """``{"type": "string"}`` is ``"string"``; records, enums and collections stay dicts."""
    if isinstance(schema, dict) and isinstance(schema.get("type"), str | list | dict):
        inner = schema["type"]
        if inner not in ("record", "enum", "array", "map", "fixed", "error"):
            return inner if not schema.get("logicalType") else schema
    return schema


def _type_name(schema: Any) -> str:
    if isinstance(schema, dict):
        kind = str(schema.get("type"))
        return kind if kind != "error" else "record"
    if isinstance(schema, list):
        return "union"
    return str(schema)


def _where(path: str) -> str:
    return f"field '{path}'" if path else "the record"
