"""The entries a leader fires and how far each has got: no clock, no Kafka.

The caller passes the time in and reports each fire it made, so the whole
firing logic runs in unit tests with a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from producer.scheduler.entry import CronEntry, dedupe_key
from producer.scheduler.misfire import decide
from producer.scheduler.timing import CronSchedule

__all__ = ["CronTable", "Due", "Fire", "FireKind", "Skip"]


class FireKind(StrEnum):
    SCHEDULED = "scheduled"  # on time, or late by at most the misfire grace
    CATCH_UP = "catch_up"  # the one fire standing for a misfired window


@dataclass(frozen=True, kw_only=True)
class Fire:
    """One fire time of one entry: becomes one job with :attr:`dedupe_key`."""

    entry: CronEntry
    at: datetime
    kind: FireKind = FireKind.SCHEDULED

    @property
    def dedupe_key(self) -> str:
        return dedupe_key(self.entry.name, self.at)


@dataclass(frozen=True, kw_only=True)
class Skip:
    """A misfired window that a ``skip`` entry let go: fire times ``first``..``last``."""

    entry: CronEntry
    first: datetime
    last: datetime


@dataclass(frozen=True, kw_only=True)
class Due:
    fires: tuple[Fire, ...]
    skips: tuple[Skip, ...]


@dataclass(kw_only=True)
class _Slot:
    entry: CronEntry
    schedule: CronSchedule
    since: datetime
    next_fire: datetime
    held_until: datetime | None = None

    def advance(self, since: datetime) -> None:
        self.since = since
        self.next_fire = self.schedule.next_after(since)


class CronTable:
    """Per entry the last fire (or the time it was first seen) and the next fire."""

    def __init__(self, *, grace: timedelta) -> None:
        self._grace = grace
        self._slots: dict[str, _Slot] = {}

    def add(self, entry: CronEntry, *, since: datetime) -> None:
        """Track ``entry`` from ``since``: its last fire, or now for an entry never fired
        (its first fire is then the next one, nothing before it is "missed")."""
        if entry.name in self._slots:
            raise ValueError(f"cron entry {entry.name!r} is already scheduled")
        schedule = entry.cron_schedule()
        self._slots[entry.name] = _Slot(
            entry=entry, schedule=schedule, since=since, next_fire=schedule.next_after(since)
        )

    def __contains__(self, name: object) -> bool:
        return name in self._slots

    def due(self, now: datetime) -> Due:
        """Fires to make at ``now``, oldest first; a skipped window is consumed here."""
        fires: list[Fire] = []
        skips: list[Skip] = []
        for slot in self._slots.values():
            if slot.next_fire > now or (slot.held_until is not None and slot.held_until > now):
                continue
            decision = decide(
                slot.schedule, slot.entry.misfire, since=slot.since, now=now, grace=self._grace
            )
            kind = FireKind.CATCH_UP if decision.catch_up else FireKind.SCHEDULED
            fires.extend(Fire(entry=slot.entry, at=at, kind=kind) for at in decision.fires)
            if not decision.fires:
                slot.advance(decision.resume_after)
                if decision.missed is not None:
                    first, last = decision.missed
                    skips.append(Skip(entry=slot.entry, first=first, last=last))
        fires.sort(key=lambda fire: (fire.at, fire.entry.name))
        return Due(fires=tuple(fires), skips=tuple(skips))

    def fired(self, fire: Fire) -> None:
        """``fire`` is enqueued: the entry's schedule goes on after it."""
        slot = self._slots[fire.entry.name]
        if fire.at > slot.since:
            slot.advance(fire.at)
        slot.held_until = None

    def hold(self, name: str, until: datetime) -> None:
        """Fire nothing for ``name`` before ``until`` (its last enqueue failed)."""
        self._slots[name].held_until = until

    def next_due(self) -> datetime | None:
        """When the earliest entry is due next, or None without entries."""
        times = [
            max(slot.next_fire, slot.held_until) if slot.held_until else slot.next_fire
            for slot in self._slots.values()
        ]
        return min(times, default=None)

    def next_fire(self, name: str) -> datetime:
        return self._slots[name].next_fire
