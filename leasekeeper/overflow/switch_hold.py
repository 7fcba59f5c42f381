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
import threading
from collections.abc import Callable
from typing import Protocol

from jobcore.kafka import KafkaException, TopicPartition
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.tier_gate import wall_ms
from schemas.job_headers import Switch

log = logging.getLogger(__name__)

# How long an overflow partition waits at an unpassed switch before it is fetched
# again, and how often the ready partitions' commits are asked for meanwhile.
RECHECK_MS = 200
# How long one look-up may take (on the reader's own thread, never the loop's).
TIMEOUT_S = 5.0


class CommitSource(Protocol):
    """What the reader needs of a consumer of the queue's group."""

    def committed(
        self, partitions: list[TopicPartition], timeout: float = ...
    ) -> list[TopicPartition]: ...

    def close(self) -> None: ...


class CommitReader:
    """The group's committed offsets of the partitions someone waits for, read on a
    thread of its own with a consumer of its own (it never joins the group): a look-up
    is a broker round trip, and the loop must not stop fetching for everyone while it
    waits for one. Started with the first partition wanted."""

    def __init__(
        self, make: Callable[[], CommitSource], *, interval_s: float = RECHECK_MS / 1000
    ) -> None:
        self._make = make
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._wanted: set[TopicPart] = set()
        self._known: dict[TopicPart, int] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lookups = 0

    def want(self, tp: TopicPart) -> None:
        with self._lock:
            self._wanted.add(tp)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="switch-commits", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def known(self, tp: TopicPart) -> int:
        """The committed offset last read for ``tp`` (-1: none yet)."""
        with self._lock:
            return self._known.get(tp, -1)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(TIMEOUT_S + 1)

    def _run(self) -> None:
        try:
            source = self._make()
        except KafkaException as exc:  # e.g. a client setting librdkafka refuses
            log.warning("cannot read the group's commits (diverted jobs wait out their "
                        "switch's deadline): %s", exc)  # fmt: skip
            return
        try:
            while not self._stop.is_set():
                self._wake.wait()
                self._wake.clear()
                with self._lock:
                    asked, self._wanted = sorted(self._wanted, key=str), set()
                if asked:
                    self._read(source, asked)
                    self._stop.wait(self._interval_s)  # at most one look-up an interval
        finally:
            source.close()

    def _read(self, source: CommitSource, asked: list[TopicPart]) -> None:
        try:
            answer = source.committed(
                [TopicPartition(tp.topic, tp.partition) for tp in asked], timeout=TIMEOUT_S
            )
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: a closed consumer
            log.debug("reading the commits diverted jobs wait for: %s", exc)
            with self._lock:  # asked again: the records stay held meanwhile
                self._wanted.update(asked)
            self._wake.set()
            return
        with self._lock:
            self.lookups += 1
            for part in answer:
                if part.error is None and part.offset >= 0:
                    tp = TopicPart(part.topic, part.partition)
                    self._known[tp] = max(part.offset, self._known.get(tp, -1))


class SwitchHolds:
    """Whether each diverted record may go out. Without a ``reader`` (a loop built
    without Kafka, in unit tests) every switch passes at once."""

    def __init__(
        self,
        reader: CommitReader | None,
        *,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self._reader = reader
        self._clock_ms = clock_ms
        self.held = 0  # records found waiting, counted for inspect and tests

    def passed(self, switch: Switch) -> bool:
        """Whether a record with ``switch`` may be handed out now; when not, its ready
        partition's commit is asked for (on the reader's thread)."""
        if self._reader is None or self._clock_ms() >= switch.deadline_ms:
            return True
        ready = TopicPart(switch.topic, switch.partition)
        if self._reader.known(ready) > switch.offset:
            return True
        self._reader.want(ready)
        self.held += 1
        return False

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
