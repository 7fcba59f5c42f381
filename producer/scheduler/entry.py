"""A cron entry: what to enqueue, on which schedule, and what to do about missed fires.

Entries are checked when built, whether they come from a TOML file or from
``Scheduler.add``, so a typo fails at start-up with the entry and the field
named instead of at 02:30 on a Sunday.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import NoReturn

from jobcore.topics import QueueTopics
from producer.scheduler.timing import CronSchedule, load_zone

__all__ = ["CronConfigError", "CronEntry", "MisfirePolicy", "dedupe_key"]

_INT32_MAX = 2**31 - 1


class CronConfigError(ValueError):
    """An invalid cron entry; ``entry`` (its name, or ``#N`` for the Nth unnamed
    entry of a file) and ``field`` say where."""

    def __init__(self, entry: str, field: str, problem: str) -> None:
        label = entry if entry.startswith("#") else repr(entry)
        super().__init__(f"cron entry {label}: field {field!r}: {problem}")
        self.entry = entry
        self.field = field


class MisfirePolicy(StrEnum):
    """What a scheduler that was down does about the fires it missed."""

    CATCH_UP_ONCE = "catch_up_once"  # one job, for the most recent missed fire time
    SKIP = "skip"  # nothing; resume at the next fire time


@dataclass(frozen=True, kw_only=True)
class CronEntry:
    """Enqueue ``type`` with ``payload`` on ``queue`` for ``tenant`` at every fire of
    ``schedule`` read in ``timezone``.

    ``schedule`` is a cron expression: 5 fields, or 6 with seconds first. The
    payload is frozen so an entry can be shared between threads.
    """

    name: str
    schedule: str
    queue: str
    type: str
    tenant: str
    timezone: str = "UTC"
    payload: Mapping[str, object] = field(default_factory=dict)
    misfire: MisfirePolicy = MisfirePolicy.CATCH_UP_ONCE
    max_attempts: int | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() or c == "@" for c in self.name):
            self._fail("name", "must be non-empty, without spaces or '@' (keys are name@time)")
        self._check_targets()
        self._check_limits()
        try:
            object.__setattr__(self, "misfire", MisfirePolicy(self.misfire))
        except ValueError:
            choices = ", ".join(p.value for p in MisfirePolicy)
            self._fail("misfire", f"{self.misfire!r} is not one of {choices}")
        object.__setattr__(self, "payload", MappingProxyType(dict(self.payload)))
        self.cron_schedule()  # raises for a bad expression or zone

    def cron_schedule(self) -> CronSchedule:
        """The parsed schedule; raises CronConfigError naming the bad field."""
        try:
            load_zone(self.timezone)
        except ValueError as exc:
            self._fail("timezone", str(exc))
        try:
            return CronSchedule.parse(self.schedule, self.timezone)
        except ValueError as exc:
            self._fail("schedule", str(exc))

    def _check_targets(self) -> None:
        try:
            QueueTopics(queue=self.queue)
        except ValueError as exc:
            self._fail("queue", str(exc))
        if not self.type:
            self._fail("type", "must name a job type")
        if not self.tenant:
            self._fail("tenant", "must be a non-empty tenant id (the partition key)")

    def _check_limits(self) -> None:
        if self.max_attempts is not None and not 1 <= self.max_attempts <= _INT32_MAX:
            self._fail("max_attempts", f"must be >= 1, got {self.max_attempts}")
        if self.timeout_s is not None and not (
            self.timeout_s > 0 and math.isfinite(self.timeout_s)
        ):
            self._fail("timeout_s", f"must be a positive number of seconds, got {self.timeout_s}")

    def _fail(self, field_name: str, problem: str) -> NoReturn:
        raise CronConfigError(self.name, field_name, problem)


def dedupe_key(name: str, fire: datetime) -> str:
    """``name@2025-03-30T01:00:00Z``: the same for every scheduler that fires it."""
    return f"{name}@{fire.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"
