"""``LeaseAnswer``: the answer for one lease in a heartbeat or settle batch.

The one definition both processes use: the leasekeeper makes it, its RPC layer
turns it into the protobuf message, the worker's client turns that back into it.
Slotted, not a dataclass: one is made per job in every heartbeat and settle batch.
"""

from __future__ import annotations


class LeaseAnswer:
    """``ok``: extended or settled. ``retry_later``: not known yet (a restarted
    leasekeeper has not re-read the lease); the worker keeps the job and asks again."""

    __slots__ = ("lease_id", "ok", "reason", "retry_later", "until_ms")

    lease_id: str
    ok: bool
    reason: str
    until_ms: int
    retry_later: bool

    def __init__(
        self,
        *,
        lease_id: str,
        ok: bool,
        reason: str = "",
        until_ms: int = 0,
        retry_later: bool = False,
    ) -> None:
        self.lease_id = lease_id
        self.ok = ok
        self.reason = reason
        self.until_ms = until_ms
        self.retry_later = retry_later

    def _fields(self) -> tuple[str, bool, str, int, bool]:
        return (self.lease_id, self.ok, self.reason, self.until_ms, self.retry_later)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LeaseAnswer) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"LeaseAnswer(lease_id={self.lease_id!r}, ok={self.ok}, reason={self.reason!r}, "
                f"until_ms={self.until_ms}, retry_later={self.retry_later})")  # fmt: skip
