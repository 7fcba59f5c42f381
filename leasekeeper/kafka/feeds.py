"""What the leasekeeper follows besides its jobs: compacted topics read whole before
the first job is leased, then followed by the consumer loop at every step.

Three topics are read this way, each by its own owner: the control topics
(cancellations and dedupe keys, ``kafka/control_feed.py``), the breaker topic
(``breaker/feed.py``) and the ordering lane (``ordering/lane.py``). The service
catches each up in turn, naming it while it waits, and hands them all to the loop
at construction; the loop polls them in one place. A new one is one more feed in
that list, not a new attribute of the loop.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Feed"]


class Feed(Protocol):
    """A compacted topic read to its end at start, then followed."""

    @property
    def what(self) -> str:
        """What it reads, for the log while the leasekeeper waits for it."""
        ...

    def catch_up(self, timeout_s: float = 60.0) -> None:
        """Read to the end offsets as of now (raise when Kafka does not answer)."""
        ...

    def poll(self) -> None:
        """Apply what arrived since the last call, without waiting."""
        ...

    def close(self) -> None: ...
