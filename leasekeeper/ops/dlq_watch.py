"""The queue's dead letters, watched for the metrics: depth and newest age.

"Poison job: alert on DLQ depth." The depth and the time of the newest dead
letter are Kafka's figures (the dashboard's ``KafkaView`` asks for them), not the
leasekeeper's: they count every leasekeeper's dead letters and survive
restarts. A daemon thread asks every ``interval_s`` and keeps the last answer,
so a scrape never waits on Kafka; while Kafka does not answer, the last figures
stay, with the time they were taken.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from leasekeeper.dashboard.kafka_view import DeadLetterFigures
from leasekeeper.views.snapshots import DeadLetterView

log = logging.getLogger(__name__)

INTERVAL_S = 15.0


class DlqWatch:
    def __init__(
        self,
        figures: Callable[[], DeadLetterFigures],
        *,
        interval_s: float = INTERVAL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._figures = figures
        self._interval_s = interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._last: DeadLetterView | None = None
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="dlq-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def view(self) -> DeadLetterView | None:
        """The last figures (None until the first answer)."""
        return self._last

    def check(self) -> None:
        """Ask once; a failure keeps the last figures (logged, not raised)."""
        try:
            found = self._figures()
        except Exception as exc:  # the watch must outlive a broker outage
            # Said once a streak at WARNING: a DLQ-depth alert that froze silently
            # (an ACL, a broker problem) would look like a quiet DLQ.
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "DLQ figures unavailable (the DLQ depth shown is the last "
                    "one read, checked_ms says when): %s", exc)  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.warning("DLQ figures available again")
        self._failing = False
        at = int(self._clock() * 1000)
        self._last = DeadLetterView(depth=found.depth, newest_ms=found.newest_ms, checked_ms=at)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self._interval_s)
