"""How ``producer enqueue`` reads ``--delay`` and ``--at``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from producer.durations import parse_at, parse_delay


@pytest.mark.parametrize(
    ("text", "delay"),
    [
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("2h", timedelta(hours=2)),
        ("3d", timedelta(days=3)),
        ("250ms", timedelta(milliseconds=250)),
        ("1.5h", timedelta(minutes=90)),
        ("45", timedelta(seconds=45)),
        ("2.5", timedelta(seconds=2.5)),
        (" 10m ", timedelta(minutes=10)),
        ("0", timedelta(0)),
    ],
)
def test_delays_are_a_number_and_a_unit_or_plain_seconds(text: str, delay: timedelta) -> None:
    assert parse_delay(text) == delay


@pytest.mark.parametrize("text", ["", "m", "10 m", "10min", "-5s", "1h30m", "ten", "1e3", ".5s"])
def test_a_malformed_delay_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid delay .*: seconds \(e\.g\. 90\) or a number"):
        parse_delay(text)


@pytest.mark.parametrize(
    ("text", "instant"),
    [
        ("2030-01-01T09:00:00Z", datetime(2030, 1, 1, 9, tzinfo=UTC)),
        ("2030-01-01T09:00:00+00:00", datetime(2030, 1, 1, 9, tzinfo=UTC)),
        ("2030-01-01T10:00:00+01:00", datetime(2030, 1, 1, 9, tzinfo=UTC)),
        ("2030-01-01T09:00:00.250Z", datetime(2030, 1, 1, 9, 0, 0, 250_000, tzinfo=UTC)),
    ],
)
def test_an_instant_is_iso_8601_with_an_offset(text: str, instant: datetime) -> None:
    parsed = parse_at(text)
    assert parsed == instant
    assert parsed.utcoffset() is not None


def test_the_offset_is_kept() -> None:
    assert parse_at("2030-01-01T10:00:00+01:00").tzinfo == timezone(timedelta(hours=1))


@pytest.mark.parametrize("text", ["2030-01-01T09:00:00", "2030-01-01"])
def test_an_instant_without_an_offset_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="has no offset: add Z"):
        parse_at(text)


@pytest.mark.parametrize("text", ["tomorrow", "2030-13-01T00:00:00Z", ""])
def test_a_malformed_instant_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid time"):
        parse_at(text)
