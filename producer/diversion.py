"""The producer's side of flood diversion: where each due-now job is written.

``producer.flood`` decides; this module waits for the deliveries a switch needs,
looks up the group's commit of the overflow lane before a tenant comes back, and
hands :class:`JobProducer` a :class:`Route` per job (the topic, the extra header,
what to note when the record is delivered).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from itertools import islice
from typing import Any

from jobcore.kafka import Consumer, KafkaException, KafkaSettings, committed_offsets, make_consumer
from jobcore.topics import QueueTopics
from producer.flood import MAX_BUCKETS, Diversion, FloodGate
from schemas.job import Job
from schemas.job_headers import Switch, switch_header

log = logging.getLogger(__name__)

# How long a switch waits for the tenant's last ready record to be delivered, and how
# long a flood stays in the ready topic when it was not (the broker is in trouble).
SWITCH_WAIT_S = 2.0
POSTPONE_S = 5.0
# How long one look-up of the overflow lane's commit may take (it blocks an enqueue).
COMMIT_LOOKUP_S = 2.0


class Route:
    """Where one job goes and what its delivery tells the diverter."""

    __slots__ = ("_diversion", "_key", "_lock", "_marks", "future", "headers", "topic")

    def __init__(
        self,
        topic: str,
        *,
        lock: threading.Lock,
        diversion: Diversion | None = None,
        headers: tuple[tuple[str, bytes], ...] = (),
        marks: dict[tuple[str, str], tuple[int, int]] | None = None,
        key: tuple[str, str] = ("", ""),
    ) -> None:
        self.topic = topic
        self.headers = headers
        # The record's future, once produced (a switch waits for the last ready one).
        self.future: Future[Any] | None = None
        self._diversion = diversion
        self._lock = lock
        # A ready record's delivery is noted in ``marks`` under ``key``: the switch is
        # the last record of the tenant that landed, even when a later one failed.
        self._marks = marks
        self._key = key

    @property
    def diverted(self) -> bool:
        return self._diversion is not None

    def delivered(self, partition: int, offset: int) -> None:
        """On the delivery thread, before the job's future resolves (deliveries of one
        partition come in offset order, so the last noted is the highest)."""
        if self._marks is not None:
            self._marks[self._key] = (partition, offset)
        if self._diversion is not None:
            with self._lock:
                self._diversion.delivered(partition, offset)

    def failed(self) -> None:
        if self._diversion is not None:
            with self._lock:
                self._diversion.failed()


class Diverter:
    """Routes due-now jobs of a class topic (see ``producer.flood``). Thread-safe."""

    def __init__(
        self,
        *,
        settings: KafkaSettings,
        gate: FloodGate,
        prefix: str,
        overflow_exists: Callable[[str], bool],
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        clock: Callable[[], float] = time.monotonic,
        switch_wait_s: float = SWITCH_WAIT_S,
    ) -> None:
        self._settings = settings
        self._gate = gate
        self._prefix = prefix
        self._overflow_exists = overflow_exists
        self._wall_ms = wall_ms
        self._clock = clock
        self._switch_wait_s = switch_wait_s
        self._lock = threading.Lock()
        # (topic, tenant) → until when its flood stays in the ready topic (a switch
        # could not be had: its last ready record was not delivered in time).
        self._postponed: dict[tuple[str, str], float] = {}
        # (topic, tenant) → the route of the producer's last ready record.
        self._last_ready: dict[tuple[str, str], Route] = {}
        # (topic, tenant) → (partition, offset) of its last ready record delivered.
        self._marks: dict[tuple[str, str], tuple[int, int]] = {}
        self._consumers: dict[str, Consumer] = {}
        self._overflow_topics: dict[str, str] = {}
        self._consumer_lock = threading.Lock()

    def route(self, job: Job, topic: str) -> Route | None:
        """The route of ``job``, due now, bound for class topic ``topic``; None: the
        ready topic, nothing to note (a calm tenant: the common case, kept cheap)."""
        key = (topic, job.tenant_id)
        with self._lock:
            diversion = self._gate.diversions.get(key)
            left = self._gate.take(key)
            if diversion is None and left >= 0:
                return self._ready(key) if self._gate.watched(left) else None
            check = diversion is not None and self._gate.due_check(key)
        overflow = self._overflow_of(job.queue)
        if diversion is not None:
            if check and self._ended(key, job.queue, overflow, diversion):
                return self._locked_ready(key)
            return self._diverted(diversion, overflow, topic)
        if self._clock() < self._postponed.get(key, 0.0) or not self._overflow_exists(overflow):
            return self._locked_ready(key)
        delivered, switch = self._switch_point(key)
        if not delivered:
            # Without its switch a diverted job could overtake the tenant's older ones.
            self._postpone(key)
            return self._locked_ready(key)
        self._postponed.pop(key, None)
        with self._lock:
            diversion = self._gate.diversions.get(key)
            if diversion is None:
                diversion = self._gate.begin(key, switch, self._wall_ms())
                log.info(
                    "tenant %r floods %s: its further jobs from this producer go to %s",
                    job.tenant_id,
                    topic,
                    overflow,
                )
        return self._diverted(diversion, overflow, topic)

    def _overflow_of(self, queue: str) -> str:
        """The queue's overflow topic, named once per queue (not per job)."""
        topic = self._overflow_topics.get(queue)
        if topic is None:
            topic = self._overflow_topics[queue] = QueueTopics(
                queue=queue, prefix=self._prefix
            ).overflow
        return topic

    def close(self) -> None:
        with self._consumer_lock:
            for consumer in self._consumers.values():
                consumer.close()
            self._consumers.clear()

    def _postpone(self, key: tuple[str, str]) -> None:
        """Keep ``key``'s flood in the ready topic for ``POSTPONE_S``. A postponement
        that has run out promises nothing, so past ``MAX_BUCKETS`` tenants only those
        still running are kept: tenant ids are unbounded, this map must not be."""
        now = self._clock()
        with self._lock:
            self._postponed[key] = now + POSTPONE_S
            if len(self._postponed) > MAX_BUCKETS:
                self._postponed = {k: at for k, at in self._postponed.items() if at > now}

    def _ready(self, key: tuple[str, str]) -> Route:
        """A route to the ready topic, remembered as the tenant's last (the lock held);
        moved to the end of the map, so that its oldest keys are its quietest."""
        route = Route(key[0], lock=self._lock, marks=self._marks, key=key)
        self._last_ready.pop(key, None)
        self._last_ready[key] = route
        if len(self._last_ready) > MAX_BUCKETS:
            self._prune()
        return route

    def _locked_ready(self, key: tuple[str, str]) -> Route:
        with self._lock:
            return self._ready(key)

    def _diverted(self, diversion: Diversion, overflow: str, topic: str) -> Route:
        """Every diverted record carries the switch: one sent again after a failed
        delivery may land behind the first ones, and must wait as they do."""
        headers: tuple[tuple[str, bytes], ...] = ()
        if diversion.switch is not None:
            partition, offset = diversion.switch
            headers = (switch_header(Switch(topic, partition, offset, diversion.deadline_ms)),)
        with self._lock:
            diversion.in_flight += 1
        return Route(overflow, lock=self._lock, diversion=diversion, headers=headers)

    def _switch_point(self, key: tuple[str, str]) -> tuple[bool, tuple[int, int] | None]:
        """(whether this producer's last ready record of the tenant is settled, and the
        (partition, offset) of the last of them that was delivered: None when none
        was, so nothing of the tenant waits there)."""
        with self._lock:
            last = self._last_ready.get(key)
        if last is None:
            return True, None
        future = last.future
        if future is None:  # another thread is producing it right now
            return False, None
        try:
            future.exception(timeout=self._switch_wait_s)
        except FutureTimeout:
            log.warning(
                "the last ready job of tenant %r on %s was not delivered within %.0fs: "
                "its flood stays there for %.0fs",
                key[1],
                key[0],
                self._switch_wait_s,
                POSTPONE_S,
            )
            return False, None
        return True, self._marks.get(key)

    def _ended(self, key: tuple[str, str], queue: str, overflow: str, diversion: Diversion) -> bool:
        """Whether the group's commit of the overflow partition passed the last diverted
        record: then the diversion ends and the job goes to the ready topic."""
        if diversion.partition < 0:
            return False
        try:
            consumer = self._consumer(queue)
            committed = committed_offsets(
                consumer, overflow, [diversion.partition], timeout=COMMIT_LOOKUP_S
            ).get(diversion.partition, -1)
        except KafkaException as exc:
            log.debug("looking up the commit of %s: %s", overflow, exc)
            return False  # stays diverted; looked up again later
        with self._lock:
            ended = self._gate.may_end(key, committed)
        if ended:
            log.info("tenant %r is back on %s", key[1], key[0])
        return ended

    def _consumer(self, queue: str) -> Consumer:
        """A member of the queue's group that never joins it: it only reads commits."""
        with self._consumer_lock:
            consumer = self._consumers.get(queue)
            if consumer is None:
                group = QueueTopics(queue=queue, prefix=self._prefix).consumer_group
                consumer = self._consumers[queue] = make_consumer(self._settings, group)
            return consumer

    def _prune(self) -> None:
        """Forget the settled last records of tenants not being diverted, the quietest
        first (the dict's order), half of them at most: a tenant of 10,000 others that
        has been quiet since has had its jobs run."""
        for key in list(islice(self._last_ready, MAX_BUCKETS // 2)):
            future = self._last_ready[key].future
            if future is not None and future.done() and key not in self._gate.diversions:
                del self._last_ready[key]
                self._marks.pop(key, None)
