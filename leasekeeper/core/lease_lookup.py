"""``LeaseLookup``: which lease a worker's call names, or the answer refusing it.

Every call that names a lease (heartbeat, settle) goes through here first, so the
fences are in one place: a stale token is refused and counted ("lease tokens fence
zombies"), a lease this leasekeeper may still learn of after a restart is "retry
later", and a settlement sent again because its answer was lost is "already
settled", not an error the worker would report.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from leasekeeper.core.context import Counters
from leasekeeper.core.leases import Lease, SettleKind, Settlement, parse_lease_id, refused
from leasekeeper.core.partition_book import PartitionBook, PartitionState
from leasekeeper.core.recent import RECENT_LIMIT
from leasekeeper.core.settle_in import SettleIn
from schemas.lease_answer import LeaseAnswer

# Settlements kept so a resend (seconds later) is answered "applied", not "unknown lease".
RECENT_SETTLEMENTS = RECENT_LIMIT
RETRY_LATER = "retry later: this leasekeeper is still taking its partitions back"


class LeaseLookup:
    """Finds leases by id and token; the engine's lock guards it."""

    def __init__(
        self,
        book: PartitionBook,
        counters: Counters,
        monotonic: Callable[[], float],
        settle_in_s: float,
    ) -> None:
        self._book = book
        self._counters = counters
        self._monotonic = monotonic
        self.settle_in = SettleIn(until=monotonic() + settle_in_s)
        self._recently_settled: OrderedDict[tuple[str, str], None] = OrderedDict()

    def find(self, lease_id: str, token: str) -> tuple[PartitionState, Lease] | LeaseAnswer:
        """The lease a call names, or the answer refusing it. A lease this leasekeeper
        may still learn of (settling in, or its offset not re-read yet) is "retry
        later"; one on a partition it does not own is never accepted: it may be
        assigned elsewhere."""
        try:
            tp, offset = parse_lease_id(lease_id)
        except ValueError:
            return refused(lease_id, "malformed lease id")
        state = self._book.parts.get(tp)
        lease = state.leases.get(offset) if state else None
        if lease is None:
            if self._not_known_yet(state, offset):
                return LeaseAnswer(
                    lease_id=lease_id, ok=False, reason=RETRY_LATER, retry_later=True
                )
            return refused(lease_id, "unknown lease (expired, settled or moved)")
        assert state is not None
        if lease.token != token:
            return refused(lease_id, "stale token")
        return state, lease

    def _not_known_yet(self, state: PartitionState | None, offset: int) -> bool:
        if state is not None and offset in state.stored_leases:
            return True  # leased before the restart; its record is not re-read yet
        return state is None and self.settling()

    def settling(self) -> bool:
        """True while leases not known yet are answered "retry later" (see SettleIn)."""
        return self.settle_in.active(
            self._monotonic(), lambda: any(s.stored_leases for s in self._book.parts.values())
        )

    def refusal(self, found: LeaseAnswer) -> LeaseAnswer:
        if not found.retry_later:
            self._counters.stale_rejected += 1
        return found

    def refused_settlement(self, item: Settlement, found: LeaseAnswer) -> LeaseAnswer:
        if (item.lease_id, item.token) in self._recently_settled or self._acked_before(item):
            return LeaseAnswer(lease_id=item.lease_id, ok=True, reason="already settled")
        return self.refusal(found)

    def _acked_before(self, item: Settlement) -> bool:
        """An ack this store kept with its token before a restart: sent again because
        the restart lost its answer (a worker would report the job refused)."""
        if item.outcome is not SettleKind.ACK:
            return False
        try:
            tp, offset = parse_lease_id(item.lease_id)
        except ValueError:
            return False
        state = self._book.parts.get(tp)
        return state is not None and state.acked_tokens.get(offset) == item.token

    def remember_settled(self, lease_id: str, token: str) -> None:
        self._recently_settled[(lease_id, token)] = None
        if len(self._recently_settled) > RECENT_SETTLEMENTS:
            self._recently_settled.popitem(last=False)
