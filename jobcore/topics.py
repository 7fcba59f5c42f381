"""Topic and group naming for a queue: the one place these strings are built."""

from __future__ import annotations

import os
from dataclasses import dataclass
from string import Formatter

DEFAULT_PREFIX = "jobs"
# The consumer group of a queue's leasekeepers, for every process that names it
# (``leasekeeper serve``, the producer's diversion, the dashboard): one setting, so a
# producer never waits on commits of a group no leasekeeper is in. ``{queue}`` and
# ``{prefix}`` are replaced by the queue's.
ENV_GROUP = "JOBS_GROUP"
DEFAULT_GROUP = "leasekeeper.{prefix}.{queue}"
DEFAULT_CLASS = "default"
# The last part of a topic name that a queue's own topics use: a queue named
# ``emails.critical`` would collide with the critical class topic of ``emails``.
RESERVED_SUFFIXES = frozenset(
    {
        "critical",
        "bulk",
        "overflow",
        "dlq",
        "retry",
        "status",
        "control",
        "dedupe",
        "breakers",
        "ordering",
        "results",
    }
)


def leasekeepers_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """Every leasekeeper's latest snapshot (compacted, keyed by instance): ``jobs._leasekeepers``.

    One topic for all queues of a prefix, so a dashboard finds every leasekeeper on
    every host without being told where they run."""
    return f"{prefix}._leasekeepers"


def outbox_relays_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """Every outbox relay's latest backlog report (compacted, keyed by instance):
    ``jobs._outbox_relays``, read by the dashboard like ``jobs._leasekeepers``."""
    return f"{prefix}._outbox_relays"


@dataclass(frozen=True, kw_only=True)
class QueueTopics:
    """Names of every topic and group that belong to queue ``queue``."""

    queue: str
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not self.queue or any(c in self.queue for c in " /\\:"):
            raise ValueError(f"invalid queue name {self.queue!r}: use letters, digits, . _ -")
        parts = self.queue.split(".")
        clash = next((p for p in parts[1:] if p in RESERVED_SUFFIXES), None)
        if clash is not None:
            raise ValueError(
                f"invalid queue name {self.queue!r}: {clash!r} after a dot is reserved for the "
                f"topics of a queue ({', '.join(sorted(RESERVED_SUFFIXES))}); rename the queue"
            )

    @property
    def ready(self) -> str:
        """Ready jobs, keyed by tenant: ``jobs.Q``."""
        return f"{self.prefix}.{self.queue}"

    def of_class(self, name: str) -> str:
        """A priority class's topic: ``jobs.Q`` for the default class, else ``jobs.Q.<class>``."""
        return self.ready if name == DEFAULT_CLASS else f"{self.prefix}.{self.queue}.{name}"

    def classes(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """The topics of the priority classes ``names``, the default class's first."""
        ordered = sorted(names, key=lambda n: n != DEFAULT_CLASS)
        return tuple(self.of_class(name) for name in ordered)

    @property
    def overflow(self) -> str:
        """A flooding tenant's excess (reserved: see docs/fairness.md): ``jobs.Q.overflow``."""
        return f"{self.prefix}.{self.queue}.overflow"

    @property
    def dlq(self) -> str:
        """Dead letters with their error history: ``jobs.Q.dlq``."""
        return f"{self.prefix}.{self.queue}.dlq"

    def retry(self, tier: str, priority_class: str = DEFAULT_CLASS) -> str:
        """A priority class's delay tier: ``jobs.Q.retry.<tier>`` for the default class
        (the name queues had before classes had tiers of their own, so their waiting
        jobs are still read), ``jobs.Q.<class>.retry.<tier>`` for the others, so a
        critical retry never waits in a partition behind bulk retries."""
        return f"{self.of_class(priority_class)}.retry.{tier}"

    def is_tier(self, topic: str) -> bool:
        """Whether ``topic`` is a delay tier of this queue, of any class."""
        start = f"{self.ready}."
        if not topic.startswith(start):
            return False
        parts = topic[len(start) :].split(".")
        return (len(parts) == 2 and parts[0] == "retry") or (
            len(parts) == 3 and parts[1] == "retry"
        )

    @property
    def control(self) -> str:
        """Cancellations (compacted, keyed by job id), read whole by every leasekeeper."""
        return f"{self.prefix}.{self.queue}.control"

    @property
    def dedupe(self) -> str:
        """First job seen per (tenant, dedupe key) (compacted), read whole by every leasekeeper."""
        return f"{self.prefix}.{self.queue}.dedupe"

    @property
    def breakers(self) -> str:
        """Circuit breaker state per job type (compacted, keyed by type), read whole by
        every leasekeeper: ``jobs.Q.breakers``."""
        return f"{self.prefix}.{self.queue}.breakers"

    @property
    def ordering(self) -> str:
        """The ordering lane (compacted, one record per job out of its line's partition,
        keyed ``topic|partition|seq``), read whole by every leasekeeper: ``jobs.Q.ordering``."""
        return f"{self.prefix}.{self.queue}.ordering"

    @property
    def status(self) -> str:
        """How each job ended (compacted, keyed by job id): read by ``producer cancel``."""
        return f"{self.prefix}.{self.queue}.status"

    @property
    def results(self) -> str:
        """Handlers' return values (keyed by job id, partition by ``jobcore.results``'s
        hash of it, kept as long as status records): read by ``JobProducer.result``."""
        return f"{self.prefix}.{self.queue}.results"

    @property
    def consumer_group(self) -> str:
        """The leasekeepers of one queue share this consumer group: ``JOBS_GROUP``, or
        ``leasekeeper.PREFIX.QUEUE``."""
        return queue_group(self.queue, self.prefix, os.environ.get(ENV_GROUP))


def queue_group(queue: str, prefix: str = DEFAULT_PREFIX, template: str | None = None) -> str:
    """The consumer group named by ``template`` (``JOBS_GROUP``; the default when empty)
    for ``queue``. A template without ``{queue}`` puts every queue's leasekeepers in
    one group: allowed, but each queue's rebalances then move all of them."""
    template = template or DEFAULT_GROUP
    try:
        fields = {name for _, name, _, _ in Formatter().parse(template) if name is not None}
        unknown = fields - {"queue", "prefix"}
        if unknown or "" in fields:
            raise ValueError(f"unknown field {{{sorted(unknown)[0] if unknown else ''}}}")
        group = template.format(queue=queue, prefix=prefix)
    except (ValueError, IndexError, KeyError) as exc:
        raise ValueError(
            f"invalid {ENV_GROUP} {template!r}: {exc}; use a group name, with {{queue}} "
            "and {prefix} where the queue's name and topic prefix go"
        ) from None
    if not group.strip():
        raise ValueError(f"invalid {ENV_GROUP} {template!r}: the group name is empty")
    return group
