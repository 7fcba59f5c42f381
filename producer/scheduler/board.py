"""The leader's notice board: each entry as it runs it, with its next and last fire,
on the compacted ``PREFIX._scheduler.NAME.entries`` topic that the dashboard reads.

It only informs people: a record that cannot be written is logged and the leader
goes on firing. At the start of each term the leader replaces the board's content
with its own entries, so an entry removed from the configuration disappears.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterable

from jobcore.cron_board import CronEntryView, read_compacted
from jobcore.kafka import KafkaError, KafkaException, KafkaSettings, Message, make_producer
from producer.scheduler.options import SchedulerOptions

__all__ = ["KafkaEntryBoard", "leader_id"]

log = logging.getLogger(__name__)

_REPLACE_TIMEOUT_S = 10.0


def leader_id() -> str:
    """``host:pid``: which scheduler process is the leader, for a person to find it."""
    return f"{socket.gethostname()}:{os.getpid()}"


class KafkaEntryBoard:
    def __init__(self, settings: KafkaSettings, options: SchedulerOptions) -> None:
        self._settings = settings
        self._topic = options.entries_topic
        self._producer = make_producer(settings)

    def replace(self, views: Iterable[CronEntryView]) -> None:
        """The board shows exactly ``views``: others (removed entries) are deleted.
        Returns once written, so it is complete before the term's first fire."""
        wanted = {view.name.encode(): view for view in views}
        try:
            shown = read_compacted(self._settings, self._topic)
        except (KafkaException, TimeoutError) as exc:
            log.warning("cannot read the cron entries board %s: %s", self._topic, exc)
            shown = {}
        for key in shown.keys() - wanted.keys():
            self._produce(key, None)
        for key, view in wanted.items():
            self._produce(key, view.encode())
        if self._producer.flush(_REPLACE_TIMEOUT_S):  # once a term: worth being sure
            log.warning("the cron entries board was not replaced within %gs", _REPLACE_TIMEOUT_S)

    def publish(self, view: CronEntryView) -> None:
        self._produce(view.name.encode(), view.encode())

    def _produce(self, key: bytes, value: bytes | None) -> None:
        try:
            self._producer.produce(self._topic, key=key, value=value, on_delivery=_report)
        except (BufferError, KafkaException) as exc:
            log.warning("cannot update the cron entries board %s: %s", self._topic, exc)
        self._producer.poll(0)

    def poll(self) -> None:
        self._producer.poll(0)

    def close(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        if self._producer.flush(max(0.0, deadline - time.monotonic())):
            log.warning("some cron board records were not written within %gs", timeout)


def _report(error: KafkaError | None, message: Message) -> None:
    if error is not None:
        log.warning("updating the cron entries board failed: %s", error)
