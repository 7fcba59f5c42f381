"""Where features meet the core: the protocols the core calls, and never the features
themselves.

The core (intake, lease core, deliveries) knows a feature only through one of these.
A feature implements the ones it needs in its own folder, and the engine, the one
place that builds both, hands it in. A new feature that needs the core to call it at
a new point adds that point here, once, for every feature.

- ``OfferHook``: a fetched job, before it is queued, may be taken by a feature
  (the overflow lane moves a flooding tenant's jobs aside) or skipped as a copy the
  feature knows already ran.
- ``Lines``: ordered jobs (with an ordering key) wait in their key's line instead
  of the window; the core hands them to the lines on arrival and tells the lines
  when one ends.
- ``DeliveryHook``: a copy is durable; a feature that made the copy for itself
  (a lane record, a dedupe claim) settles it, or counts it (an overflow move).
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.leases import Pending

__all__ = ["DeliveryHook", "Lines", "Offer", "OfferHook"]


class Offer(Enum):
    """What an ``OfferHook`` makes of a fetched job."""

    PASS = "pass"  # not this hook's: the next one, then the window
    SKIP = "skip"  # resolve it without running it (a copy that already ran)
    TAKEN = "taken"  # the hook has it (copied elsewhere; resolved once that is durable)


class OfferHook(Protocol):
    def offered(self, pending: Pending) -> Offer:
        """A job just fetched, neither resolved before nor cancelled nor a duplicate."""
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


class DeliveryHook(Protocol):
    def copy_delivered(self, request: CopyRequest, *, dead: bool, at: int) -> bool:
        """``request`` is durable (at offset ``at`` of its topic, -1 when not known;
        ``dead``: a dead letter went instead, the copy being too large). True when the
        copy is settled here and its source offset must not resolve."""
        ...
