"""The breakers' port, for the breaker topic's feed (``breaker/feed.py``) and the
views: state changes to publish, states published elsewhere to adopt."""

from __future__ import annotations

import threading
from collections.abc import Callable

from leasekeeper.breaker.gate import BreakerGate
from leasekeeper.breaker.states import BreakerState, BreakerView, Transition
from leasekeeper.core.clocks import now_ms
from leasekeeper.core.copy_queue import CopyQueue
from leasekeeper.core.window import ReadyWindow

__all__ = ["BreakerPort"]


class BreakerPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        gate: BreakerGate,
        window: ReadyWindow,
        copies: CopyQueue,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self._lock = lock
        self._gate = gate
        self._window = window
        self._copies = copies
        self._clock = clock
        self._monotonic = monotonic

    def transitions(self) -> list[Transition]:
        """Breaker state changes since the last call, for the breaker topic."""
        with self._lock:
            return self._gate.take_transitions()

    def adopt(
        self,
        job_type: str,
        *,
        state: BreakerState,
        until_ms: int,
        cooldown_s: float,
        trips: int,
        forced: bool,
        reason: str,
    ) -> None:
        """Take a breaker state published on the queue's breaker topic (by another
        leasekeeper, an operator, or this one before a restart). ``until_ms`` is wall
        time; the breaker runs on the monotonic clock."""
        with self._lock:
            until = self._monotonic() + (until_ms - now_ms(self._clock)) / 1000
            self._gate.adopt(job_type, state=state, until=until, cooldown_s=cooldown_s,
                             trips=trips, forced=forced, reason=reason)  # fmt: skip
            self._copies.add(self._gate.sweep(self._window))

    def wall_ms(self, monotonic_s: float) -> int:
        """A breaker's monotonic deadline as epoch ms (0 stays 0), for the topic."""
        if monotonic_s <= 0:
            return 0
        return now_ms(self._clock) + int((monotonic_s - self._monotonic()) * 1000)

    def views(self) -> list[BreakerView]:
        with self._lock:
            return self._gate.views()
