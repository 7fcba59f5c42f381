"""The record on a queue's status topic that says whether its jobs get status records.

A lookup that finds no status record for a job must tell "switched off" from "not
finished": each leasekeeper says which at start-up (a tombstone while records are on).
"""

from __future__ import annotations

import logging
import time

from jobcore.control import STATUS_SWITCH_KEY, StatusSwitchedOff
from jobcore.kafka import KafkaError, KafkaException, Producer, produce_reliably
from leasekeeper.core.clocks import now_ms

log = logging.getLogger(__name__)


def announce_status_switch(producer: Producer, topic: str, *, on: bool, instance: str) -> None:
    """Write the switch and wait for Kafka to take it (raises a transient
    ``KafkaException`` when it does not within 10 s: the caller retries)."""
    value = None if on else StatusSwitchedOff(at_ms=now_ms(time.time), instance=instance)
    produce_reliably(
        producer,
        topic,
        key=STATUS_SWITCH_KEY,
        value=value.encode() if value is not None else None,
        on_delivery=_switch_reported,
    )
    if producer.flush(10) > 0:
        raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))


def _switch_reported(error: KafkaError | None, message: object) -> None:
    """The switch record only informs lookups: a failure is worth a warning, no more."""
    if error is not None:
        log.warning("could not record the status switch on the status topic: %s", error)
