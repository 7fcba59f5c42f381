"""Started-only attempts: what an expired lease costs when its job never started.

A worker that prefetches holds more leases than it has handlers, so some jobs
wait in the worker before they run. Their attempt is counted at claim like every
job's (invariant 4: a job that kills its worker still reaches the DLQ). The
claim says how many of its jobs go to idle handlers (``start_now``): those count
as started at once. The others wait, and the worker reports each one whose
handler started (``LeaseRef.started`` in its heartbeats). When a lease expires
(the worker died) and its job never started, the attempt was not really made, so
it is given back and the job goes to the front of the window, as a release would.

Two rules bound the refunds, because a handler that kills its process right
after it starts, before the report leaves, looks exactly like a job that never
started. A job handed to an idle handler is started at claim: a poison job that
a restarted (idle) worker claims spends its attempt every time, as without
prefetch. And each fetched record gets at most ``max_refunds`` refunds (counted
in the store, so a restart does not reset them); after that an expired lease
spends its attempt whatever the worker reported. A poison job therefore reaches
the DLQ after at most ``max_attempts x (max_refunds + 1)`` crashes (each retry
is a new record), and after ``max_attempts`` when idle workers pick it up.
"""

from __future__ import annotations

from dataclasses import dataclass

from leasekeeper.core.leases import Lease

MAX_REFUNDS = 1


@dataclass(frozen=True, kw_only=True)
class StartedOnly:
    """Decides whether an expired lease gives its attempt back."""

    max_refunds: int = MAX_REFUNDS

    def refunds(self, lease: Lease, refunded_before: int) -> bool:
        """True when ``lease`` (expired) never started and its record has refunds left."""
        return not lease.started and refunded_before < self.max_refunds
