"""Jobs a producer diverted to the overflow lane wait for their switch.

A producer that finds one tenant flooding writes the tenant's further jobs to
``jobs.Q.overflow`` (``producer.flood``). Each such record names its *switch*: the
ready partition and the offset of the producer's last record of that tenant
there. Handing a diverted job out before that ready partition's commit has passed
the switch could start it before the tenant's older jobs. So the loop holds the
overflow partition at such a record (seek back, pause, as a delay tier waits for
its head) and asks Kafka for the ready partition's committed offset, which may be
another leasekeeper's, until it has passed, or until the switch's deadline.

Nothing here is durable state: the switch travels in the record, the commit is
the group's, so a restart or a partition move finds the same answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from jobcore.kafka import Consumer, KafkaException, TopicPartition
from leasekeeper.family_consumer import FamilyConsumer
from leasekeeper.leases import TopicPart
from leasekeeper.tier_gate import wall_ms
from schemas.job_headers import Switch

log = logging.getLogger(__name__)

# How long an overflow partition waits at an unpassed switch before it is fetched
# again, and how often the ready partitions' commits are asked for meanwhile.
RECHECK_MS = 200
# How long one look-up may block the loop.
TIMEOUT_S = 2.0


class SwitchHolds:
    def __init__(
        self,
        *,
        interval_s: float = RECHECK_MS / 1000,
        clock: Callable[[], float] = time.monotonic,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._clock_ms = clock_ms
        self._next = 0.0
        # Ready partition → the group's committed offset there, as last read.
        self._committed: dict[TopicPart, int] = {}
        # Ready partitions a held record waits for.
        self._waiting: set[TopicPart] = set()
        self.held = 0  # records found waiting, counted for inspect and tests

    def passed(self, switch: Switch) -> bool:
        """Whether a record with ``switch`` may be handed out now; when not, its ready
        partition's commit is asked for on the next ``poll``."""
        if self._clock_ms() >= switch.deadline_ms:
            return True
        ready = TopicPart(switch.topic, switch.partition)
        if self._committed.get(ready, -1) > switch.offset:
            return True
        self._waiting.add(ready)
        self.held += 1
        return False

    def poll(self, consumer: Consumer | FamilyConsumer) -> None:
        """Read the awaited ready partitions' committed offsets, when due."""
        if not self._waiting:
            return
        now = self._clock()
        if now < self._next:
            return
        self._next = now + self._interval_s
        asked = [TopicPartition(tp.topic, tp.partition) for tp in sorted(self._waiting, key=str)]
        try:
            answer = consumer.committed(asked, timeout=TIMEOUT_S)
        except KafkaException as exc:
            log.debug("reading the commits diverted jobs wait for: %s", exc)
            return  # asked again next time; the records stay held meanwhile
        for part in answer:
            if part.error is None and part.offset >= 0:
                tp = TopicPart(part.topic, part.partition)
                self._committed[tp] = max(part.offset, self._committed.get(tp, -1))
        self._waiting.clear()
