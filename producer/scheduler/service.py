"""``Scheduler``: cron entries fired by whichever scheduler process is the leader.

Run as many as you like with the same name: Kafka group membership elects one
leader, the others wait to take over. Every fire is enqueued with the dedupe key
``name@fire_time``, so the rare double fire of a failover (an old leader that has
not noticed yet) is two jobs with one key, which the leasekeeper runs once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from datetime import timedelta

from jobcore.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_S
from jobcore.kafka import KafkaSettings
from producer.api import JobProducer
from producer.request import JobRequest
from producer.scheduler.board import KafkaEntryBoard, leader_id
from producer.scheduler.entry import CronConfigError, CronEntry
from producer.scheduler.leadership import KafkaLeadership
from producer.scheduler.loop import CronLoop
from producer.scheduler.options import SchedulerOptions
from producer.scheduler.state import KafkaStateLog, ensure_scheduler_topics
from producer.scheduler.table import Fire
from schemas.codec import EnvelopeCodec, PayloadError, SchemaRegistry

__all__ = ["Scheduler", "check_payload", "enqueue_fire"]


class Scheduler:
    """Holds the entries; :meth:`run` takes part in the election and fires while leader.

    ``clock`` (epoch seconds) decides fire times, so tests can move time; Kafka's
    own timeouts stay on the real clock.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        options: SchedulerOptions | None = None,
        entries: Iterable[CronEntry] = (),
        registry: SchemaRegistry | None = None,
        clock: Callable[[], float] = time.time,
        on_fire: Callable[[Fire, str], None] | None = None,
    ) -> None:
        self._settings = settings
        self._options = options if options is not None else SchedulerOptions()
        self._registry = registry if registry is not None else SchemaRegistry()
        self._codec = EnvelopeCodec(self._registry)
        self._clock = clock
        self._on_fire = on_fire
        self._entries: dict[str, CronEntry] = {}
        self._lock = threading.Lock()
        self._loop: CronLoop | None = None
        for entry in entries:
            self.add(entry)

    @property
    def options(self) -> SchedulerOptions:
        return self._options

    @property
    def entries(self) -> tuple[CronEntry, ...]:
        with self._lock:
            return tuple(self._entries.values())

    @property
    def is_leader(self) -> bool:
        loop = self._loop
        return loop is not None and loop.is_leader

    def add(self, entry: CronEntry) -> None:
        """Schedule ``entry``, also while running; raises CronConfigError for a duplicate
        name or a payload its job type's schema rejects."""
        check_payload(self._codec, entry)
        with self._lock:
            if entry.name in self._entries:
                raise CronConfigError(entry.name, "name", "another entry has this name")
            self._entries[entry.name] = entry
            if self._loop is not None:
                self._loop.add(entry)

    def run(self, stop: threading.Event) -> None:
        """Take part in the election until ``stop`` is set; fire while leader.

        On the way out the leader records what it fired and leaves the group, so a
        follower takes over without waiting for the session timeout.
        """
        ensure_scheduler_topics(self._settings, self._options)
        with ExitStack() as stack:  # closed in reverse: jobs, then state, then the group
            leadership = KafkaLeadership(self._settings, self._options)
            stack.callback(leadership.close)
            state = KafkaStateLog(self._settings, self._options)
            stack.callback(state.close)
            board = KafkaEntryBoard(self._settings, self._options)
            stack.callback(board.close)
            producer = stack.enter_context(
                JobProducer(self._settings, registry=self._registry, prefix=self._options.prefix)
            )
            loop = CronLoop(
                leader=leadership,
                state=state,
                sink=lambda fire: enqueue_fire(producer, fire),
                grace=timedelta(seconds=self._options.misfire_grace_s),
                clock=self._clock,
                on_fire=self._on_fire,
                board=board,
                leader_id=leader_id(),
            )
            with self._lock:
                for entry in self._entries.values():
                    loop.add(entry)
                self._loop = loop
            stack.callback(self._detach)
            leadership.start()
            while not stop.is_set():
                loop.step()

    def _detach(self) -> None:
        with self._lock:
            self._loop = None


def enqueue_fire(producer: JobProducer, fire: Fire) -> str:
    """The job of one fire, with its dedupe key; shared with the testing package, whose
    cron fires enqueue exactly what a scheduler would."""
    entry = fire.entry
    request = JobRequest(
        queue=entry.queue,
        type=entry.type,
        payload=entry.payload,
        tenant_id=entry.tenant,
        dedupe_key=fire.dedupe_key,
        max_attempts=DEFAULT_MAX_ATTEMPTS if entry.max_attempts is None else entry.max_attempts,
        timeout_s=DEFAULT_TIMEOUT_S if entry.timeout_s is None else entry.timeout_s,
    )
    return producer.enqueue(request)


def check_payload(codec: EnvelopeCodec, entry: CronEntry) -> None:
    """CronConfigError when ``entry``'s payload does not match its type's schema; shared
    by the scheduler and ``cron list``, so the two refuse the same files."""
    try:
        codec.validate_payload(entry.type, entry.payload)
    except PayloadError as exc:
        raise CronConfigError(entry.name, "payload", str(exc)) from exc
