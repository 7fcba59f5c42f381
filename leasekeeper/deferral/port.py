"""The deferral's port, for the fetcher that triggers it and the readers that hand the
deferred records back (``reader.py``), and its view for ``inspect`` and metrics."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from leasekeeper.core.fetch_port import FetchPort
from leasekeeper.core.leases import TopicPart
from leasekeeper.deferral.floods import FloodDeferral, Reading
from schemas.job_headers import JobHead

__all__ = ["DeferralPort", "DeferralView"]


@dataclass(frozen=True, kw_only=True)
class DeferralView:
    """A flood being read past: whose, where, since when, and how far."""

    topic: str
    partition: int
    tenant: str
    since_ms: int
    waiting: int  # records of the tenant deferred and not handed back yet
    deferred: int  # records deferred since it began
    read_past: int  # other tenants' records fetched past it meanwhile


class DeferralPort:
    def __init__(
        self,
        *,
        lock: threading.RLock,
        deferral: FloodDeferral,
        fetch: FetchPort,
        read_past_cap: int,
    ) -> None:
        """``read_past_cap``: how far past its commit a partition read past a flood may
        be fetched at most."""
        self.read_past_cap = read_past_cap
        self._lock = lock
        self._deferral = deferral
        self._fetch = fetch

    @property
    def enabled(self) -> bool:
        return self._deferral.enabled

    def floods(self, over: set[TopicPart], slice_: int) -> set[TopicPart]:
        """Defer the tenants flooding ``over`` (see ``FloodDeferral.floods``); returns
        the partitions to fetch on."""
        with self._lock:
            return self._deferral.floods(over, slice_)

    def behind(self, tp: TopicPart, key: bytes) -> None:
        """The fetch is behind and ``key``'s tenant fills most of it: defer it on ``tp``
        (``FloodDeferral.behind``)."""
        with self._lock:
            self._deferral.behind(tp, key)

    def deferring(self) -> set[TopicPart]:
        with self._lock:
            return self._deferral.deferring()

    def reading(self, slice_: int, window_records: int) -> list[Reading]:
        with self._lock:
            return self._deferral.reading(slice_, window_records)

    def hand_back(self, records: Sequence[tuple[TopicPart, int, JobHead, bytes]]) -> int:
        """Records read again from Kafka: the deferred ones among them (in order) go where
        a fresh job would; returns how many did."""
        return self._fetch.offer_again(records, self._deferral.taken)

    def dead_letter(self, tp: TopicPart, offset: int, raw: tuple[bytes | None, bytes | None],
                    reason: str) -> None:  # fmt: skip
        """A deferred record read again and found undecodable: to the DLQ."""
        self._fetch.dead_letter_again(tp, offset, raw, reason, self._deferral.taken)

    def gone(self, tp: TopicPart, offset: int) -> None:
        """The next deferred record of ``tp`` is no longer in Kafka: let go."""
        self._fetch.let_go(tp, offset, self._deferral.gone)

    def views(self) -> list[DeferralView]:
        with self._lock:
            return [
                DeferralView(
                    topic=tp.topic,
                    partition=tp.partition,
                    tenant=e.tenant,
                    since_ms=e.since_ms,
                    waiting=len(e.offsets),
                    deferred=e.deferred,
                    read_past=e.read_past,
                )
                for tp, e in sorted(self._deferral.entries.items())
            ]
