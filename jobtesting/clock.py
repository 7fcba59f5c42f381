"""A clock that moves only when told to, for the leasekeeper, the producer and handlers.

The real code takes its clocks as arguments (the engine's ``clock`` and
``monotonic``, the consumer loop's and outbox's ``clock``, the tier gate's
``clock_ms``, the producer's ``clock``); a test hands them one ``FakeClock`` so that
backoff, delays and timeouts pass in no time and the same way on every run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["FakeClock"]

# Far from zero, so that a difference of two readings never looks like "unset".
_MONOTONIC_START = 1_000.0


class FakeClock:
    """Wall time (``time()``, epoch seconds) and ``monotonic()`` that move together,
    only by ``advance(seconds)``. ``start`` is the wall time it shows first (default:
    the real time when it is made, so dates look like today's).

    ``call_at(when, callback)`` runs ``callback`` once the monotonic time reaches
    ``when``, on the thread that advanced it: how a time limit reaches a handler that
    itself moves the clock (a handler cannot be interrupted by a clock that stands
    still)."""

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        # A whole second by default: times in reports and due times read cleanly.
        self._wall = float(int(time.time())) if start is None else float(start)
        self._monotonic = _MONOTONIC_START
        self._alarms: list[tuple[float, int, Callable[[], None]]] = []
        self._next_alarm = 0

    def time(self) -> float:
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def time_ms(self) -> int:
        """Epoch milliseconds, as the tier gate reads its clock."""
        return int(self.time() * 1000)

    def advance(self, seconds: float) -> None:
        """Move both clocks ``seconds`` forward, then run the alarms now due."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward: advance({seconds!r})")
        self._move(lambda wall: wall + seconds)

    def advance_to(self, wall: float) -> None:
        """Move both clocks forward until ``time()`` is ``wall`` exactly (a due time
        read in epoch milliseconds is reached, not missed by a rounding)."""
        self._move(lambda _: wall)

    def _move(self, to: Callable[[float], float]) -> None:
        with self._lock:
            wall = to(self._wall)
            if not wall >= self._wall:
                raise ValueError(f"a clock only moves forward: {wall!r} is in its past")
            self._monotonic += wall - self._wall
            self._wall = wall
            now = self._monotonic
            due = [alarm for alarm in self._alarms if alarm[0] <= now]
            self._alarms = [alarm for alarm in self._alarms if alarm[0] > now]
        for _, _, callback in sorted(due, key=lambda alarm: alarm[:2]):
            callback()

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` on this clock: returns at once, ``seconds`` later."""
        self.advance(max(0.0, seconds))

    def call_at(self, when: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run ``callback`` when ``monotonic()`` reaches ``when``; returns a function that
        cancels it."""
        with self._lock:
            self._next_alarm += 1
            alarm = (when, self._next_alarm, callback)
            self._alarms.append(alarm)

        def cancel() -> None:
            with self._lock:
                if alarm in self._alarms:
                    self._alarms.remove(alarm)

        return cancel

    def __repr__(self) -> str:
        return f"FakeClock(time={self.time():.3f}, monotonic={self.monotonic():.3f})"
