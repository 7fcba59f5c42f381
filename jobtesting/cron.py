"""Cron entries fired on the fake clock by the scheduler's own loop.

``producer.scheduler.loop.CronLoop`` decides the fire times (schedules, time zones,
misfires) and records the last fires in the scheduler's state topic (here in the
memory cluster); each fire enqueues what a real scheduler enqueues
(``enqueue_fire``: the entry's job with its ``name@time`` dedupe key). The one part
left out is the election among schedulers: this one is always the leader.
"""

from __future__ import annotations

from datetime import timedelta

from jobcore.kafka import KafkaSettings
from jobtesting.clock import FakeClock
from producer.api import JobProducer
from producer.scheduler.entry import CronEntry
from producer.scheduler.loop import CronLoop
from producer.scheduler.options import SchedulerOptions
from producer.scheduler.service import enqueue_fire
from producer.scheduler.state import KafkaStateLog, ensure_scheduler_topics

__all__ = ["MemoryCron"]


class _Leader:
    """The only scheduler of its group: leader from the start, for one term."""

    @property
    def term(self) -> int | None:
        return 1

    def poll(self, timeout: float) -> None:
        pass


class MemoryCron:
    def __init__(self, *, settings: KafkaSettings, producer: JobProducer, clock: FakeClock) -> None:
        options = SchedulerOptions()
        ensure_scheduler_topics(settings, options)
        self._state = KafkaStateLog(settings, options)
        self._loop = CronLoop(
            leader=_Leader(),
            state=self._state,
            sink=lambda fire: enqueue_fire(producer, fire),
            grace=timedelta(seconds=options.misfire_grace_s),
            clock=clock.time,
        )
        self.entries: list[CronEntry] = []

    def add(self, entry: CronEntry) -> None:
        if any(known.name == entry.name for known in self.entries):
            raise ValueError(f"cron entry {entry.name!r} is scheduled already")
        self.entries.append(entry)
        self._loop.add(entry)

    def step(self) -> None:
        """Fire what is due now (the first step starts the term: fires from now on)."""
        if self.entries:
            self._loop.step()

    def next_due_ms(self) -> int | None:
        due = self._loop.next_due() if self.entries else None
        return None if due is None else round(due.timestamp() * 1000)

    def close(self) -> None:
        self._state.close()
