"""Fire times of a cron expression in an IANA time zone, as UTC instants.

croniter is asked for *wall-clock* times only (naive datetimes, on which it does
plain calendar arithmetic); turning a wall time into an instant happens here, so
the daylight-saving rules are ours and written down once:

- a wall time inside a spring-forward gap (02:30 on the day Berlin jumps from
  02:00 to 03:00) fires once, at the first instant after the gap (03:00 local).
  Every missing wall time of the gap maps to that same instant, so a gap never
  produces more than one fire, and an entry that also fires at 03:00 fires once;
- a wall time that occurs twice on the fall-back day fires once, at its first
  occurrence. (croniter, given an aware datetime, fires it twice.)

This mapping never goes backwards in time, which is what lets ``next_after``
start its search at the wall time of the instant it is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

__all__ = ["CronSchedule", "instant_of", "load_zone", "parse_expression"]

_SECOND = timedelta(seconds=1)


def parse_expression(expression: str) -> tuple[str, bool]:
    """The normalised expression and whether its first field is seconds.

    Five fields are standard cron; six put seconds first (``*/2 * * * * *``),
    which tests use to see many fires in a few seconds. Raises ValueError.
    """
    fields = expression.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        seconds = False
    elif len(fields) in (5, 6):
        seconds = len(fields) == 6
    else:
        raise ValueError(
            f"{expression!r} has {len(fields)} fields; expected 5 (minute hour day month "
            "weekday) or 6 (seconds first)"
        )
    normalised = " ".join(fields)
    if not croniter.is_valid(normalised, second_at_beginning=seconds):
        raise ValueError(f"{expression!r} is not a valid cron expression")
    return normalised, seconds


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; raises ValueError for a name the tz database lacks."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a directory name
        raise ValueError(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Berlin')"
        ) from exc


@dataclass(frozen=True, kw_only=True)
class CronSchedule:
    """A cron expression read in a time zone; every instant it yields is UTC."""

    expression: str
    zone: ZoneInfo

    @classmethod
    def parse(cls, expression: str, zone: str) -> CronSchedule:
        """Raises ValueError for a bad expression, an unknown zone, or one that never fires."""
        schedule = cls(expression=parse_expression(expression)[0], zone=load_zone(zone))
        try:
            schedule.next_after(datetime(2000, 1, 1, tzinfo=UTC))
        except Exception as exc:  # croniter's CroniterBadDateError and friends
            raise ValueError(f"{expression!r} never fires ({exc})") from exc
        return schedule

    def next_after(self, instant: datetime) -> datetime:
        """The first fire strictly after ``instant`` (timezone-aware)."""
        return next(self.iter_after(instant))

    def iter_after(self, instant: datetime) -> Iterator[datetime]:
        """Fires strictly after ``instant``, in order, each instant once."""
        after = _utc(instant)
        # Wall times at or before the wall time of ``after`` map to instants at or
        # before ``after`` (the mapping never goes backwards), so start there and
        # skip what still maps too early: the repeated hour of a fall-back day,
        # and the missing wall times of a gap that all map to one instant.
        for wall in self._walls(self._wall(after), backwards=False):
            fire = instant_of(wall, self.zone)
            if fire > after:
                after = fire
                yield fire

    def latest_at_or_before(self, instant: datetime) -> datetime:
        """The most recent fire at or before ``instant``."""
        until = _utc(instant)
        start = self._wall(until) + _SECOND  # croniter's get_prev is strictly before
        latest = instant_of(next(self._walls(start, backwards=True)), self.zone)
        # A later wall time can still map at or before ``until`` (fall-back day).
        for fire in self.iter_after(latest):
            if fire > until:
                break
            latest = fire
        return latest

    def _wall(self, instant: datetime) -> datetime:
        """The local wall time of ``instant``, whole seconds, naive."""
        return instant.astimezone(self.zone).replace(tzinfo=None, fold=0, microsecond=0)

    def _walls(self, start: datetime, *, backwards: bool) -> Iterator[datetime]:
        seconds = len(self.expression.split()) == 6
        cursor = croniter(self.expression, start, second_at_beginning=seconds)
        step = cursor.get_prev if backwards else cursor.get_next
        while True:
            wall = step(datetime)
            assert isinstance(wall, datetime) and wall.tzinfo is None
            yield wall


def instant_of(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant at which the naive wall time ``wall`` in ``zone`` fires.

    Unambiguous: its one instant. Repeated (fall-back): the first occurrence.
    Missing (spring-forward gap): the first instant after the gap.
    """
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset() or _exists(first):
        return first.astimezone(UTC)  # fold=0 is the earlier of two occurrences
    return _gap_end(wall, zone, first, second)


def _exists(local: datetime) -> bool:
    wall = local.replace(tzinfo=None)
    return local.astimezone(UTC).astimezone(local.tzinfo).replace(tzinfo=None) == wall


def _gap_end(wall: datetime, zone: ZoneInfo, first: datetime, second: datetime) -> datetime:
    """The transition instant that skipped ``wall``: the first one after the gap.

    In a gap fold=0 reads the wall time with the offset before the jump and fold=1
    with the offset after it, so the jump lies between those two readings; find
    it to the second (tz database transitions are whole seconds).
    """
    before, after = first.utcoffset(), second.utcoffset()
    assert before is not None and after is not None
    naive_utc = wall.replace(tzinfo=UTC)
    low = int((naive_utc - after).timestamp())  # still before the jump
    high = int((naive_utc - before).timestamp())  # already after it
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == before:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, UTC)


def _utc(instant: datetime) -> datetime:
    if instant.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got {instant!r}")
    return instant.astimezone(UTC)
