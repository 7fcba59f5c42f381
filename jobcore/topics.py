"""Topic and group naming for a queue: the one place these strings are built."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "jobs"


def leasekeepers_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """Every leasekeeper's latest snapshot (compacted, keyed by instance): ``jobs._leasekeepers``.

    One topic for all queues of a prefix, so a dashboard finds every leasekeeper on
    every host without being told where they run."""
    return f"{prefix}._leasekeepers"


@dataclass(frozen=True, kw_only=True)
class QueueTopics:
    """Names of every topic and group that belong to queue ``queue``."""

    queue: str
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.queue or any(c in self.queue for c in " /\\:"):
            raise ValueError(f"invalid queue name {self.queue!r}: use letters, digits, . _ -")

    @property
    def ready(self) -> str:
        """Ready jobs, keyed by tenant: ``jobs.Q``."""
        return f"{self.prefix}.{self.queue}"

    @property
    def dlq(self) -> str:
        """Dead letters with their error history: ``jobs.Q.dlq``."""
        return f"{self.prefix}.{self.queue}.dlq"

    def retry(self, tier: str) -> str:
        """A delay tier: ``jobs.Q.retry.<tier>``."""
        return f"{self.prefix}.{self.queue}.retry.{tier}"

    @property
    def control(self) -> str:
        """Cancellations (compacted, keyed by job id), read whole by every leasekeeper."""
        return f"{self.prefix}.{self.queue}.control"

    @property
    def dedupe(self) -> str:
        """First job seen per (tenant, dedupe key) (compacted), read whole by every leasekeeper."""
        return f"{self.prefix}.{self.queue}.dedupe"

    @property
    def status(self) -> str:
        """How each job ended (compacted, keyed by job id): read by ``producer cancel``."""
        return f"{self.prefix}.{self.queue}.status"

    @property
    def consumer_group(self) -> str:
        """The leasekeepers of one queue share this consumer group."""
        return f"leasekeeper.{self.prefix}.{self.queue}"
