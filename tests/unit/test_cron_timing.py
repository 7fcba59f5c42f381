"""Next-fire computation: wall-clock schedules in IANA zones, across DST transitions.

The rules (docs/scheduling.md): a wall time that does not exist fires once, at
the first instant after the gap; a wall time that occurs twice fires once, at
its first occurrence.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from producer.scheduler.timing import CronSchedule, instant_of

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires(expression: str, zone: str, after: datetime, count: int) -> list[datetime]:
    return list(islice(CronSchedule.parse(expression, zone).iter_after(after), count))


def local(instants: list[datetime], zone: ZoneInfo) -> list[str]:
    return [i.astimezone(zone).strftime("%m-%d %H:%M:%S %Z") for i in instants]


# -- spring forward: the wall time does not exist ------------------------------------


def test_berlin_spring_forward_fires_once_at_the_end_of_the_gap() -> None:
    # 2025-03-30: 02:00 CET becomes 03:00 CEST; 02:30 never happens.
    got = fires("30 2 * * *", "Europe/Berlin", utc(2025, 3, 28, 12), 3)
    assert local(got, BERLIN) == [
        "03-29 02:30:00 CET",
        "03-30 03:00:00 CEST",
        "03-31 02:30:00 CEST",
    ]
    assert got[1] == utc(2025, 3, 30, 1, 0)


def test_new_york_spring_forward_fires_once_at_the_end_of_the_gap() -> None:
    # 2025-03-09: 02:00 EST becomes 03:00 EDT.
    got = fires("30 2 * * *", "America/New_York", utc(2025, 3, 8, 0), 3)
    assert local(got, NEW_YORK) == [
        "03-08 02:30:00 EST",
        "03-09 03:00:00 EDT",
        "03-10 02:30:00 EDT",
    ]
    assert got[1] == utc(2025, 3, 9, 7, 0)


def test_every_missing_wall_time_of_a_gap_collapses_into_one_fire() -> None:
    # 02:00, 02:20, 02:40 and 03:00 all map to 03:00 CEST: one fire, not four.
    got = fires("0,20,40 2,3 * * *", "Europe/Berlin", utc(2025, 3, 29, 12), 4)
    assert local(got, BERLIN) == [
        "03-30 03:00:00 CEST",
        "03-30 03:20:00 CEST",
        "03-30 03:40:00 CEST",
        "03-31 02:00:00 CEST",
    ]


def test_an_hourly_entry_just_skips_the_missing_hour() -> None:
    got = fires("15 * * * *", "America/New_York", utc(2025, 3, 9, 5, 30), 3)
    assert local(got, NEW_YORK) == [
        "03-09 01:15:00 EST",
        "03-09 03:00:00 EDT",
        "03-09 03:15:00 EDT",
    ]


# -- fall back: the wall time occurs twice --------------------------------------------


def test_berlin_fall_back_fires_once_at_the_first_occurrence() -> None:
    # 2025-10-26: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
    got = fires("30 2 * * *", "Europe/Berlin", utc(2025, 10, 25, 12), 2)
    assert local(got, BERLIN) == ["10-26 02:30:00 CEST", "10-27 02:30:00 CET"]
    assert got[0] == utc(2025, 10, 26, 0, 30)


def test_new_york_fall_back_fires_once_at_the_first_occurrence() -> None:
    # 2025-11-02: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    got = fires("30 1 * * *", "America/New_York", utc(2025, 11, 1, 12), 2)
    assert local(got, NEW_YORK) == ["11-02 01:30:00 EDT", "11-03 01:30:00 EST"]


def test_croniter_alone_would_fire_the_repeated_time_twice() -> None:
    """Why the correction exists: on aware datetimes croniter fires both occurrences."""
    native = croniter("30 2 * * *", datetime(2025, 10, 25, 12, tzinfo=BERLIN))
    first, second = native.get_next(datetime), native.get_next(datetime)
    assert first.date() == second.date()  # the same day, twice
    ours = fires("30 2 * * *", "Europe/Berlin", utc(2025, 10, 25, 12), 2)
    assert ours[0].date() != ours[1].date()


def test_a_frequent_entry_pauses_during_the_repeated_hour() -> None:
    # Wall times 02:00-02:40 fire in their first pass; the second pass repeats
    # them, so nothing fires until 03:00 CET (one UTC hour later).
    got = fires("*/20 * * * *", "Europe/Berlin", utc(2025, 10, 25, 23, 50), 5)
    assert [g.strftime("%H:%M") for g in got] == ["00:00", "00:20", "00:40", "02:00", "02:20"]


def test_the_next_fire_after_an_instant_in_the_repeated_hour() -> None:
    schedule = CronSchedule.parse("*/20 * * * *", "Europe/Berlin")
    # 01:30 UTC is 02:30 CET, the second pass: wall times 02:40... fired already.
    assert schedule.next_after(utc(2025, 10, 26, 1, 30)) == utc(2025, 10, 26, 2, 0)
    assert schedule.latest_at_or_before(utc(2025, 10, 26, 1, 30)) == utc(2025, 10, 26, 0, 40)
    assert schedule.latest_at_or_before(utc(2025, 10, 26, 0, 30)) == utc(2025, 10, 26, 0, 20)


# -- ordinary days ----------------------------------------------------------------------


def test_a_daily_entry_across_a_normal_day_is_24_hours_apart() -> None:
    got = fires("0 9 * * *", "Europe/Berlin", utc(2025, 6, 10, 12), 3)
    assert local(got, BERLIN) == [
        "06-11 09:00:00 CEST",
        "06-12 09:00:00 CEST",
        "06-13 09:00:00 CEST",
    ]
    assert {b - a for a, b in pairwise(got)} == {timedelta(hours=24)}


def test_a_daily_entry_keeps_its_wall_time_across_both_transitions() -> None:
    got = fires("0 9 * * *", "America/New_York", utc(2025, 3, 8, 0), 3)
    assert [g - f for f, g in pairwise(got)] == [
        timedelta(hours=23),  # the short day
        timedelta(hours=24),
    ]
    got = fires("0 9 * * *", "America/New_York", utc(2025, 11, 1, 0), 3)
    assert got[1] - got[0] == timedelta(hours=25)  # the long day
    assert local(got, NEW_YORK)[1] == "11-02 09:00:00 EST"


def test_the_seconds_form_puts_seconds_first() -> None:
    got = fires("*/2 * * * * *", "UTC", utc(2025, 1, 1, 0, 0, 0), 3)
    assert got == [utc(2025, 1, 1, 0, 0, 2), utc(2025, 1, 1, 0, 0, 4), utc(2025, 1, 1, 0, 0, 6)]


def test_next_after_is_strictly_after_and_ignores_subseconds() -> None:
    schedule = CronSchedule.parse("* * * * * *", "UTC")
    assert schedule.next_after(utc(2025, 1, 1, 0, 0, 5)) == utc(2025, 1, 1, 0, 0, 6)
    half = utc(2025, 1, 1, 0, 0, 5) + timedelta(milliseconds=500)
    assert schedule.next_after(half) == utc(2025, 1, 1, 0, 0, 6)
    assert schedule.latest_at_or_before(half) == utc(2025, 1, 1, 0, 0, 5)


def test_an_aware_instant_is_required() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        CronSchedule.parse("* * * * *", "UTC").next_after(datetime(2025, 1, 1))


def test_instant_of_a_missing_wall_time_in_a_half_hour_dst_zone() -> None:
    # Lord Howe Island moves its clocks by 30 minutes: 02:00 -> 02:30 on 2025-10-05.
    zone = ZoneInfo("Australia/Lord_Howe")
    got = instant_of(datetime(2025, 10, 5, 2, 15), zone)
    assert got.astimezone(zone).strftime("%H:%M") == "02:30"


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("* * *", "has 3 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("61 * * * *", "not a valid cron expression"),
        ("0 0 30 2 *", "never fires"),
    ],
)
def test_bad_expressions_are_refused(expression: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        CronSchedule.parse(expression, "UTC")


def test_aliases_are_accepted() -> None:
    assert fires("@daily", "UTC", utc(2025, 1, 1, 12), 1) == [utc(2025, 1, 2)]
