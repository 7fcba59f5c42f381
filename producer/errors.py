"""What enqueueing and cancelling raise, apart from the producer that raises it, so
that a command can tell a setup mistake (exit 2) from Kafka failing (exit 1 or 3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["CancelError", "EnqueueError", "MissingTopic"]


class EnqueueError(Exception):
    """Kafka did not acknowledge some jobs: ``failures`` maps their ids to the reason.

    ``delivered`` lists the ids of a batch that did land, so a caller can retry
    only the rest (re-enqueueing a delivered job would run it twice).
    """

    def __init__(
        self,
        message: str,
        *,
        failures: Mapping[str, str] | None = None,
        delivered: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.failures = dict(failures or {})
        self.delivered = list(delivered)


class MissingTopic(EnqueueError):
    """A topic the job needs does not exist (no queue, class or tier of that name):
    nothing was sent, and sending again will not help until it is created, so the
    commands exit 2, as ``leasekeeper serve`` does for a missing queue."""


class CancelError(Exception):
    """The cancellation was not recorded (no control topic, or Kafka refused it): the
    job may still run, so the caller must know rather than assume it was stopped."""
