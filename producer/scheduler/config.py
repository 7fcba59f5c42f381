"""Cron entries from a TOML file: an optional ``[scheduler]`` table and ``[[cron]]`` tables.

Unknown keys are errors, not ignored, so ``timzone = "Europe/Berlin"`` fails at
start-up instead of silently firing in UTC.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from producer.scheduler.entry import CronConfigError, CronEntry, MisfirePolicy
from producer.scheduler.options import SchedulerOptions

__all__ = ["CronConfig", "load_config", "parse_config"]

_REQUIRED = {"name": str, "schedule": str, "queue": str, "type": str, "tenant": str}
_OPTIONAL = {
    "timezone": str,
    "payload": dict,
    "misfire": str,
    "max_attempts": int,
    "timeout_s": float,
}
_SCHEDULER = {"name": str, "session_timeout_ms": int, "misfire_grace_s": float}


@dataclass(frozen=True, kw_only=True)
class CronConfig:
    options: SchedulerOptions
    entries: tuple[CronEntry, ...]


def load_config(path: Path, *, prefix: str | None = None) -> CronConfig:
    """Read ``path``; raises ValueError (CronConfigError for an entry) naming what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from exc
    return parse_config(document, prefix=prefix)


def parse_config(document: Mapping[str, Any], *, prefix: str | None = None) -> CronConfig:
    """The scheduler options and entries of a parsed TOML document."""
    unknown = sorted(set(document) - {"scheduler", "cron"})
    if unknown:
        raise ValueError(f"unknown top-level keys {unknown}: expected [scheduler] and [[cron]]")
    scheduler = document.get("scheduler", {})
    if not isinstance(scheduler, dict):
        raise ValueError("[scheduler] must be a table")
    unknown = sorted(set(scheduler) - set(_SCHEDULER))
    if unknown:
        raise ValueError(
            f"[scheduler]: unknown key {unknown[0]!r} (known: {', '.join(_SCHEDULER)})"
        )
    if problem := _type_problem(scheduler, _SCHEDULER):
        raise ValueError(f"[scheduler]: {problem[0]!r} {problem[1]}")
    if prefix is not None:
        scheduler = {**scheduler, "prefix": prefix}
    options = SchedulerOptions(**scheduler)
    tables = document.get("cron", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ValueError("cron entries must be [[cron]] tables")
    entries = [_entry(index, table) for index, table in enumerate(tables)]
    seen: set[str] = set()
    for entry in entries:
        if entry.name in seen:
            raise CronConfigError(entry.name, "name", "another entry has this name")
        seen.add(entry.name)
    return CronConfig(options=options, entries=tuple(entries))


def _entry(index: int, table: dict[str, Any]) -> CronEntry:
    name = table.get("name")
    label = name if isinstance(name, str) and name else f"#{index + 1}"
    for key in _REQUIRED:
        if key not in table:
            raise CronConfigError(label, key, "is required")
    unknown = sorted(set(table) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise CronConfigError(label, unknown[0], f"unknown key (known: {_known()})")
    if problem := _type_problem(table, {**_REQUIRED, **_OPTIONAL}):
        raise CronConfigError(label, *problem)
    fields = dict(table)
    if "misfire" in fields:
        fields["misfire"] = _policy(label, fields["misfire"])
    if "timeout_s" in fields:
        fields["timeout_s"] = float(fields["timeout_s"])
    return CronEntry(**fields)


def _type_problem(table: Mapping[str, Any], kinds: Mapping[str, type]) -> tuple[str, str] | None:
    """The first key whose value has the wrong type, and why; keys not in ``kinds`` pass."""
    names = {str: "a string", dict: "a table", int: "an integer", float: "a number"}
    for key, value in table.items():
        kind = kinds.get(key)
        if kind is not None and not _is(value, kind):
            return key, f"must be {names[kind]}, got {type(value).__name__} {value!r}"
    return None


def _is(value: object, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind)


def _policy(label: str, value: str) -> MisfirePolicy:
    try:
        return MisfirePolicy(value)
    except ValueError:
        choices = ", ".join(p.value for p in MisfirePolicy)
        raise CronConfigError(label, "misfire", f"{value!r} is not one of {choices}") from None


def _known() -> str:
    return ", ".join([*_REQUIRED, *_OPTIONAL])
