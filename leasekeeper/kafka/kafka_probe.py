"""Whether Kafka answers now: what ``inspect`` and the dashboard say of Kafka.

"Connected" once was not enough: a leasekeeper whose brokers never answered said
"connecting" for ever, and one that lost them later still said "connected". The
clients' own errors cannot say when an outage ends (librdkafka reports the failure,
never the recovery), so a thread asks for the queue topic's metadata every few
seconds with an admin client of its own: one small request, off every job's path.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from jobcore.kafka import ErrorWatch, KafkaError, KafkaException, KafkaSettings, make_admin

log = logging.getLogger(__name__)

# How often Kafka is asked, and how long an answer may take before it counts as down.
INTERVAL_S = 5.0
TIMEOUT_S = 2.0


class KafkaProbe:
    """``state()`` is "down" while the last probe got no answer, else "connected" or
    "connecting" (not connected yet, e.g. still reading the control topics)."""

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        interval_s: float = INTERVAL_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self._settings = settings
        self._topic = topic
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._answers: bool | None = None  # not asked yet
        # Set after each probe (tests await the first verdict with it).
        self.checked = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._timeout_s + 1)

    def state(self, connected: bool) -> str:
        if self._answers is False:
            return "down"
        return "connected" if connected else "connecting"

    def _run(self) -> None:
        # Its errors are this probe's answer, not news: the shared watch would log
        # "all brokers are down" once more per probe.
        admin = make_admin(replace(self._settings, watch=_Unheard()))
        while True:
            try:
                admin.list_topics(self._topic, timeout=self._timeout_s)
                answers = True
            except KafkaException:
                answers = False
            admin.poll(0)
            if answers != self._answers and self._answers is not None:
                log.log(logging.INFO if answers else logging.WARNING,
                        "Kafka at %s %s", self._settings.bootstrap,
                        "answers again" if answers else "does not answer")  # fmt: skip
            self._answers = answers
            self.checked.set()
            if self._stop.wait(self._interval_s):
                return


class _Unheard(ErrorWatch):
    """The probe's own client errors: its answer says it all."""

    def __call__(self, error: KafkaError) -> None:
        pass
