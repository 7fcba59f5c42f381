"""Where features meet the core: the protocols the core calls, and never the features
themselves.

The core (intake, lease core, deliveries) knows a feature only through one of these.
A feature implements the ones it needs in its own folder, and the engine, the one
place that builds both, hands it in. A new feature that needs the core to call it at
a new point adds that point here, once, for every feature.

- ``OfferHook``: a fetched job, before it is queued, may be taken by a feature
  (the overflow lane moves a flooding tenant's jobs aside; the flood deferral keeps
  those read whole, as ``FetchHold`` keeps the rest, by offset) or skipped as a copy
  the feature knows already ran.
- ``FetchHold``: records a feature holds unread, known by their partition and key
  alone (a deferred flood's tenant): the fetch tracks each one's offset, hands the
  offset to the feature and reads nothing else of it; the feature hands the job
  back later, read again from Kafka (``FetchPort.offer_again``).
- ``Lines``: ordered jobs (with an ordering key) wait in their key's line instead
  of the window; the core hands them to the lines on arrival and tells the lines
  when one ends.
- ``DispatchGate``: a claim, one job at a time: which jobs may be claimed now (a
  rate limit), whether a job popped from the window is leased or taken away without
  spending an attempt (an open breaker parks it), and how each lease ended (the
  breaker counts outcomes). The engine registers them in one ordered tuple.
- ``DeliveryHook``: a copy is durable; a feature that made the copy for itself
  (a lane record, a dedupe claim) settles it, or counts it (an overflow move). Or
  the outbox dropped it (its partition moved): the feature forgets it.
- ``PartitionHook``: a partition was assigned or revoked; a feature with state per
  partition recalls it or lets it go (the overflow lane's tenants, ordered lines, a
  rate limit's share of the queue).
- ``CommitHook``: around each commit. A feature whose copies hold offsets open as
  if they were finished jobs (the overflow lane) says how many, so leasing is not
  held back for them, and learns which commits Kafka accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import Enum
from typing import Protocol

from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.leases import Lease, Pending, Settlement, TopicPart
from leasekeeper.core.window import ReadyWindow

__all__ = [
    "Accept",
    "CommitHook",
    "DeliveryHook",
    "DispatchGate",
    "FetchHold",
    "LeaseEnd",
    "Lines",
    "Offer",
    "OfferHook",
    "PartitionHook",
]

# Which ready jobs a claim takes (its worker's types, a tenant's cap); None: any.
Accept = Callable[[Pending], bool] | None


class Offer(Enum):
    """What an ``OfferHook`` makes of a fetched job."""

    PASS = "pass"  # not this hook's: the next one, then the window
    SKIP = "skip"  # resolve it without running it (a copy that already ran)
    # The hook has it: copied elsewhere (resolved once that is durable), or deferred
    # (still unresolved, handed back with ``FetchPort.offer_again``).
    TAKEN = "taken"


class OfferHook(Protocol):
    def offered(self, pending: Pending) -> Offer:
        """A job just fetched, neither resolved before nor cancelled nor a duplicate."""
        ...


class FetchHold(Protocol):
    def holding(self) -> Mapping[TopicPart, bytes]:
        """Per partition, the record key (a tenant) whose records are held unread."""
        ...

    def held(self, tp: TopicPart, offset: int, key: bytes) -> None:
        """A record of ``key`` (``holding()[tp]`` when the fetch asked) at ``offset``,
        fetched and tracked, not read: the hold keeps it, whatever changed since."""
        ...


class Lines(Protocol):
    def offer(self, pending: Pending, *, claiming: bool = False) -> bool:
        """An ordered job due now into its line; True when it is there. ``claiming``:
        it waits there for its dedupe claim (``claimed``)."""
        ...

    def claimed(self, pending: Pending) -> None:
        """Its dedupe claim is durable: it runs in its turn."""
        ...

    def skipped(self, pending: Pending) -> None:
        """An ordered job skipped on arrival (cancelled, a duplicate, ran before)."""
        ...

    def restored(self, pending: Pending) -> None:
        """An ordered job whose lease outlived a restart: it holds its line again."""
        ...

    def finished(self, pending: Pending) -> None:
        """A job ended for good (acked, cancelled): the next of its line may go."""
        ...

    def turn(self) -> None:
        """Every loop turn: hold what waits behind a blocked head, release what may go."""
        ...


class LeaseEnd(Enum):
    """How a lease ended, for ``DispatchGate.ended``."""

    ACKED = "acked"
    FAILED = "failed"  # nacked: ``settlement`` says how
    EXPIRED = "expired"  # taken back by the reaper (lease or job timeout)
    RELEASED = "released"  # not run: given back, or refunded after an expiry


class DispatchGate(Protocol):
    def narrow(self, accept: Accept) -> Accept:
        """``accept`` narrowed to the jobs this gate lets a claim take now."""
        ...

    def admit(self, pending: Pending) -> CopyRequest | None:
        """None to lease ``pending``; else the copy that takes it away unrun, with no
        attempt spent (it resolves once durable)."""
        ...

    def granted(self, pending: Pending) -> None:
        """``pending`` was leased."""
        ...

    def ended(self, lease: Lease, end: LeaseEnd, settlement: Settlement | None) -> None:
        """A lease ended; ``settlement``: the worker's, when it settled."""
        ...

    def sweep(self, window: ReadyWindow) -> list[CopyRequest]:
        """Ready jobs this gate takes from the window now, unrun (an open breaker parks
        its type's jobs): asked after each loop turn, settle and expiry."""
        ...

    def wait_s(self, job_types: frozenset[str]) -> float:
        """How long a claim of ``job_types`` that got nothing may wait for this gate to
        let a ready job go (a rate limit's next token); 0: it holds none back."""
        ...


class DeliveryHook(Protocol):
    def copy_delivered(self, request: CopyRequest, *, dead: bool, at: int) -> bool:
        """``request`` is durable (at offset ``at`` of its topic, -1 when not known;
        ``dead``: a dead letter went instead, the copy being too large). True when the
        copy is settled here and its source offset must not resolve."""
        ...

    def copy_dropped(self, request: CopyRequest) -> None:
        """The outbox gave ``request`` up (its partition moved): it will not be delivered."""
        ...


class PartitionHook(Protocol):
    def assigned(self, tp: TopicPart, metadata: str | None) -> None:
        """``tp`` is this leasekeeper's now; ``metadata``: its commit's, if any."""
        ...

    def revoked(self, tp: TopicPart, *, held: bool) -> None:
        """``tp`` is gone; ``held``: it was assigned here (else a revoke of nothing)."""
        ...


class CommitHook(Protocol):
    def unsaved(self) -> int:
        """Offsets this feature resolved that no accepted commit holds yet and that are
        no finished jobs: they do not hold leasing back."""
        ...

    def refresh(self) -> None:
        """A commit is about to be computed: write what it must describe."""
        ...

    def sent(
        self, positions: Mapping[TopicPart, tuple[int, str]], only: set[TopicPart] | None
    ) -> None:
        """These commit positions go to Kafka (``only``: the partitions asked)."""
        ...

    def accepted(self, positions: Mapping[TopicPart, tuple[int, str]]) -> None:
        """Kafka accepted these commits."""
        ...
