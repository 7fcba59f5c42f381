"""Whether a (re)started leasekeeper is still taking its partitions back.

A restarted leasekeeper serves RPCs before the group has assigned it its
partitions and before it has re-read the offsets its stored leases sit on. A
heartbeat or ack it answers "unknown lease" in that time makes the worker drop
a job it holds, and the job runs again. Until settling in is over, a lease the
engine does not know yet is answered "retry later" instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class SettleIn:
    """Over once the first assignment arrived and every stored lease of the assigned
    partitions was re-offered, or at ``until`` (seconds on the engine's monotonic clock) at
    the latest, so a partition that never re-reads its leases cannot hold it forever."""

    def __init__(self, *, until: float) -> None:
        self._until = until
        self._assignment_seen = False
        self._over = False

    def assignment_received(self) -> None:
        """The group's first assignment (possibly empty) was applied in full."""
        self._assignment_seen = True

    def active(self, now: float, leases_to_reread: Callable[[], bool]) -> bool:
        if self._over:
            return False
        if now >= self._until:
            self._over = True
            log.info("settling in ended at its time limit; unknown leases are refused now")
        elif self._assignment_seen and not leases_to_reread():
            self._over = True
            log.info("settled in: partitions assigned and their stored leases re-read")
        return not self._over
