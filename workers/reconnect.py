"""``ReconnectBackoff``: how long a worker waits before it reconnects to its leasekeeper."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["ReconnectBackoff"]


@dataclass(frozen=True, kw_only=True)
class ReconnectBackoff:
    """Delay before the n-th consecutive reconnect: exponential, capped, half-jittered.

    The jitter keeps the worker processes of one pod from reconnecting to a
    restarted leasekeeper in lockstep.
    """

    initial_s: float = 0.05
    max_s: float = 2.0
    factor: float = 2.0

    def delay(self, failures: int, rng: random.Random) -> float:
        if failures <= 0:
            return 0.0
        # The exponent is capped so a long outage cannot overflow the float.
        base = min(self.max_s, self.initial_s * self.factor ** min(failures - 1, 64))
        return base / 2 + rng.random() * base / 2
