"""What ``producer cron list`` shows: per entry its schedule, next fire and last fire.

Rows are built by a pure function so the table's content is unit-tested; rendering
is a thin layer of rich on top.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table

from jobcore.terminal_text import escaped
from producer.scheduler.entry import CronEntry
from producer.scheduler.state import LastFire

__all__ = ["ListRow", "list_rows", "render_rows"]


@dataclass(frozen=True, kw_only=True)
class ListRow:
    entry: str
    schedule: str
    timezone: str
    misfire: str
    next_local: str
    next_utc: str
    last_fire: str


def list_rows(
    entries: Iterable[CronEntry], last_fires: Mapping[str, LastFire] | None, now: datetime
) -> list[ListRow]:
    """One row per entry; ``last_fires`` None means the state topic could not be read."""
    rows = []
    for entry in entries:
        schedule = entry.cron_schedule()
        upcoming = schedule.next_after(now)
        if last_fires is None:
            last = "unknown (state not readable)"
        else:
            fire = last_fires.get(entry.name)
            last = _utc(fire.at) if fire is not None else "never"
        rows.append(
            ListRow(
                entry=entry.name,
                schedule=entry.schedule,
                timezone=entry.timezone,
                misfire=entry.misfire.value,
                next_local=upcoming.astimezone(schedule.zone).strftime("%Y-%m-%d %H:%M:%S %Z"),
                next_utc=_utc(upcoming),
                last_fire=last,
            )
        )
    return rows


def render_rows(rows: Iterable[ListRow], console: Console | None = None) -> None:
    table = Table(title="cron entries")
    for header in ("entry", "schedule", "zone", "misfire", "next (local)", "next (UTC)", "last"):
        table.add_column(header, overflow="fold")
    for row in rows:
        # Entry names and schedules are text of a config file: never read as markup.
        cells = (row.entry, row.schedule, row.timezone, row.misfire, row.next_local,
                 row.next_utc, row.last_fire)  # fmt: skip
        table.add_row(*(escaped(cell) for cell in cells))
    (console or Console()).print(table)


def _utc(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
