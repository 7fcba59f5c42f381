"""``FakeClock``: both clocks move together, only forward, and alarms fire on the way."""

from __future__ import annotations

import pytest

from jobtesting import FakeClock


def test_both_clocks_move_together_and_only_forward() -> None:
    clock = FakeClock(start=1_000_000.0)
    mono = clock.monotonic()
    clock.advance(2.5)
    clock.sleep(0.5)
    clock.advance_to(1_000_010.0)
    assert (clock.time(), clock.monotonic() - mono) == (1_000_010.0, 10.0)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.advance_to(1_000_009.0)


def test_an_alarm_fires_once_when_the_clock_passes_it_unless_cancelled() -> None:
    clock = FakeClock()
    fired: list[str] = []
    clock.call_at(clock.monotonic() + 5, lambda: fired.append("five"))
    cancel = clock.call_at(clock.monotonic() + 6, lambda: fired.append("six"))
    clock.advance(4)
    assert fired == []
    cancel()
    clock.advance(10)
    clock.advance(10)
    assert fired == ["five"]
