"""librdkafka's "Coordinator load in progress" (a broker busy for a few seconds, the
client retrying by itself) is a DEBUG line, not a WARNING at the default level."""

from __future__ import annotations

import logging

import pytest

from jobcore.kafka import KafkaSettings

BUSY = "[thrd:main]: Failed to acquire idempotence PID: Coordinator load in progress: retrying"


def client_log(level: int, facility: str, text: str) -> None:
    """A line as confluent_kafka hands it to the client's ``logger``."""
    logger = KafkaSettings(bootstrap="x:1").base()["logger"]
    logger.log(level, "%s [%s] %s", facility, "rdkafka#producer-1", text)


def test_the_coordinator_load_line_is_not_shown_at_the_default_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("librdkafka")
    level = logger.level
    # The default level (a one-shot command run in-process before, as in the first
    # hour's tests, turns the client's lines down to CRITICAL for its process).
    logger.setLevel(logging.WARNING)
    try:
        with caplog.at_level(logging.DEBUG):
            client_log(logging.WARNING, "GETPID", BUSY)
            # A text no other test logs: a repeat within 30 s is dropped (RepeatFilter).
            client_log(logging.WARNING, "FAIL", "Connect to client-log-test.invalid:1 failed")
    finally:
        logger.setLevel(level)
    assert [(r.levelno, r.getMessage().split()[0]) for r in caplog.records] == [
        (logging.WARNING, "FAIL")
    ]


def test_the_coordinator_load_line_is_a_debug_record_when_debug_is_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("librdkafka")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG):
            client_log(logging.WARNING, "GETPID", BUSY + " again")
    finally:
        logger.setLevel(level)
    assert [(r.levelno, r.getMessage().split()[0]) for r in caplog.records] == [
        (logging.DEBUG, "GETPID")
    ]
