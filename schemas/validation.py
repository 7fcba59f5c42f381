"""Check a payload against its record schema and say which field is wrong.

fastavro's own validator reports paths such as ``send_receipt.addr.Addr.zip``
(record names mixed into the path, one message per union branch). Someone who
typed a payload on the command line wants ``field 'addr.zip' expected int, got
str 'x'``, so this small walk over the parsed schema produces exactly that, and
rejects unknown fields, which Avro would otherwise drop without a word (a typo
in an optional field's name would silently become its default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastavro.validation import validate as _fastavro_validate

__all__ = ["payload_problem", "type_name"]

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def _is_int(value: object, bounds: tuple[int, int]) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_PRIMITIVES: dict[str, Callable[[object], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "int": lambda v: _is_int(v, _INT32),
    "long": lambda v: _is_int(v, _INT64),
    "float": _is_number,
    "double": _is_number,
    "bytes": lambda v: isinstance(v, bytes | bytearray),
    "string": lambda v: isinstance(v, str),
}


def payload_problem(schema: Mapping[str, Any], payload: object) -> str | None:
    """The first thing wrong with ``payload`` for the parsed record ``schema``, or None."""
    if not isinstance(payload, Mapping):
        return f"expected an object with the record's fields, got {_describe(payload)}"
    named: Mapping[str, Any] = schema.get("__named_schemas", {})
    return _record_problem(schema, payload, "", named)


def type_name(schema: Any) -> str:
    """A short human name of an Avro type: ``long``, ``null or string``, ``array of int``."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return " or ".join(type_name(branch) for branch in schema)
    if "logicalType" in schema:
        return f"{schema['type']} ({schema['logicalType']})"
    kind = schema["type"]
    if kind in ("record", "enum", "fixed"):
        return str(schema["name"])
    if kind == "array":
        return f"array of {type_name(schema['items'])}"
    if kind == "map":
        return f"map of {type_name(schema['values'])}"
    return type_name(kind)


def _record_problem(
    schema: Mapping[str, Any], value: Mapping[Any, Any], path: str, named: Mapping[str, Any]
) -> str | None:
    fields = schema["fields"]
    known = [f["name"] for f in fields]
    for key in value:
        if key not in known:
            return f"unknown field {_join(path, str(key))!r} (fields: {', '.join(known)})"
    for f in fields:
        where = _join(path, f["name"])
        if f["name"] not in value:
            if "default" in f:
                continue
            return f"field {where!r} is required ({type_name(f['type'])})"
        problem = _problem(f["type"], value[f["name"]], where, named)
        if problem is not None:
            return problem
    return None


def _problem(schema: Any, value: object, path: str, named: Mapping[str, Any]) -> str | None:
    """Dispatch on the kind of Avro type; ``path`` is where ``value`` sits in the payload."""
    if isinstance(schema, str):
        if schema in named:
            return _problem(named[schema], value, path, named)
        return None if _PRIMITIVES[schema](value) else _mismatch(schema, value, path)
    if isinstance(schema, list):
        return _union_problem(schema, value, path, named)
    if "logicalType" in schema:
        ok = _fastavro_validate(value, schema, raise_errors=False)
        return None if ok else _mismatch(schema, value, path)
    check = _COMPLEX.get(schema["type"])
    if check is None:  # a primitive written as {"type": "long"}
        return _problem(schema["type"], value, path, named)
    return check(schema, value, path, named)


def _record_value_problem(
    schema: Mapping[str, Any], value: object, path: str, named: Mapping[str, Any]
) -> str | None:
    if not isinstance(value, Mapping):
        return _mismatch(schema, value, path)
    return _record_problem(schema, value, path, named)


def _enum_problem(
    schema: Mapping[str, Any], value: object, path: str, named: Mapping[str, Any]
) -> str | None:
    return None if value in schema["symbols"] else _mismatch(schema, value, path)


def _fixed_problem(
    schema: Mapping[str, Any], value: object, path: str, named: Mapping[str, Any]
) -> str | None:
    ok = isinstance(value, bytes) and len(value) == schema["size"]
    return None if ok else _mismatch(schema, value, path)


def _union_problem(
    branches: list[Any], value: object, path: str, named: Mapping[str, Any]
) -> str | None:
    problems = [_problem(branch, value, path, named) for branch in branches]
    if None in problems:
        return None
    # A mapping meant for the union's one record branch: report the field inside it.
    records = [
        p
        for b, p in zip(branches, problems, strict=True)
        if _resolve(b, named).get("type") == "record"
    ]
    if isinstance(value, Mapping) and len(records) == 1:
        return records[0]
    return _mismatch(branches, value, path)


def _array_problem(
    schema: Mapping[str, Any], value: object, path: str, named: Mapping[str, Any]
) -> str | None:
    if not isinstance(value, list | tuple):
        return _mismatch(schema, value, path)
    for index, item in enumerate(value):
        problem = _problem(schema["items"], item, f"{path}[{index}]", named)
        if problem is not None:
            return problem
    return None


def _map_problem(
    schema: Mapping[str, Any], value: object, path: str, named: Mapping[str, Any]
) -> str | None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        return _mismatch(schema, value, path)
    for key, item in value.items():
        problem = _problem(schema["values"], item, f"{path}[{key!r}]", named)
        if problem is not None:
            return problem
    return None


def _resolve(schema: Any, named: Mapping[str, Any]) -> Mapping[str, Any]:
    resolved: Mapping[str, Any]
    if isinstance(schema, str):
        resolved = named.get(schema, {"type": schema})
    else:
        resolved = schema if isinstance(schema, Mapping) else {"type": "union"}
    return resolved


_Check = Callable[[Mapping[str, Any], object, str, Mapping[str, Any]], "str | None"]
_COMPLEX: dict[str, _Check] = {
    "record": _record_value_problem,
    "array": _array_problem,
    "map": _map_problem,
    "enum": _enum_problem,
    "fixed": _fixed_problem,
}


def _mismatch(schema: Any, value: object, path: str) -> str:
    expected = type_name(schema)
    if schema in ("int", "long") and isinstance(value, int) and not isinstance(value, bool):
        return f"field {path!r} value {value} is out of range for {expected}"
    return f"field {path!r} expected {expected}, got {_describe(value)}"


def _describe(value: object) -> str:
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
