"""A command that waits must tell a wrong password or a missing ACL (no retry helps:
say how to fix it) from brokers that are restarting (retry with backoff), and
librdkafka reports some of these only to ``error_cb``, never as an exception. So
Kafka errors are sorted here, once, for every caller."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

# The package's name, not this module's: ``require_kafka`` quiets the adapter's
# client errors by it.
log = logging.getLogger("jobcore.kafka")


class ErrorKind(StrEnum):
    """What to do about a Kafka error."""

    TRANSIENT = "transient"  # brokers unreachable or busy: retry with backoff
    SETUP = "setup"  # credentials, configuration, authorization: a person must fix it
    OTHER = "other"  # anything else: a bug or an unexpected state; fail loudly


# Codes only a person can fix; retrying them would hang a command forever.
_SETUP_CODES = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError._INVALID_ARG,
        KafkaError._UNKNOWN_PROTOCOL,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
# Codes that mean "the cluster is not there right now": brokers down or restarting,
# a coordinator moving, a request that timed out.
_TRANSIENT_CODES = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._DESTROY_BROKER,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._RESOLVE,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.BROKER_NOT_AVAILABLE,
    }
)


class KafkaSetupError(Exception):
    """A mistake in the Kafka setup (credentials, config, a missing queue) that no
    retry can fix; the message says what is wrong and how to fix it."""


def classify_error(error: KafkaError) -> ErrorKind:
    """Setup errors first: an authentication failure can also say "retriable"."""
    if error.code() in _SETUP_CODES:
        return ErrorKind.SETUP
    if error.fatal():
        return ErrorKind.OTHER
    if error.code() in _TRANSIENT_CODES or error.retriable():
        return ErrorKind.TRANSIENT
    return ErrorKind.OTHER


def classify(exc: BaseException) -> ErrorKind:
    """Classify an exception raised by a client call, looking through wrappers."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaSetupError):
            return ErrorKind.SETUP
        if isinstance(seen, KafkaException) and isinstance(seen.args[0], KafkaError):
            return classify_error(seen.args[0])
        if isinstance(seen, TimeoutError):
            return ErrorKind.TRANSIENT
        seen = seen.__cause__
    return ErrorKind.OTHER


T = TypeVar("T")


def through_transient(
    call: Callable[[], T],
    *,
    until: float,
    pause_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, made again after a pause while it fails with a transient error (a
    leader being elected, a broker restarting) and ``clock()`` is before ``until``;
    any other error, or one past ``until``, is raised as it came. For a caller that
    waits a bounded time; a process that must outlive any outage uses
    ``jobcore.kafka_retry.until_done``."""
    while True:
        try:
            return call()
        except Exception as exc:
            if classify(exc) is not ErrorKind.TRANSIENT or clock() >= until:
                raise
        sleep(min(pause_s, max(0.0, until - clock())))


def describe_setup_error(error: KafkaError) -> str:
    """One line naming the problem and the fix, for people."""
    text = error.str()
    if error.code() in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return (
            f"Kafka rejected the credentials ({text}); check sasl.mechanism, sasl.username "
            "and sasl.password in the Kafka config file (--kafka-config or KAFKA_CONFIG)"
        )
    if "AUTHORIZATION" in error.name():
        return f"Kafka refused access ({text}); grant this principal the ACLs it needs"
    return f"Kafka client setup failed ({text}); check the Kafka config file settings"


class ErrorWatch:
    """Collects what librdkafka reports only through ``error_cb``.

    A wrong password never surfaces as an exception: librdkafka reports it to
    ``error_cb`` and keeps reconnecting, so calls just time out. Every client built
    from one ``KafkaSettings`` reports here, and code that waits asks
    :meth:`raise_if_setup_error` to fail fast with the real reason instead.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._setup: KafkaError | None = None
        self._last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        kind = classify_error(error)
        with self._lock:
            self._last = error
            if kind is ErrorKind.SETUP and self._setup is None:
                self._setup = error
        # Transport errors repeat while brokers are down; callers that wait log one
        # line per backoff step with the last reason instead.
        # "All brokers down" comes once per outage and is worth a line of its own.
        quiet = kind is ErrorKind.TRANSIENT and error.code() != KafkaError._ALL_BROKERS_DOWN
        level = logging.DEBUG if quiet else logging.WARNING
        log.log(level, "Kafka client error: %s", error.str())

    def last_reason(self) -> str | None:
        with self._lock:
            return None if self._last is None else self._last.str()

    def setup_error(self) -> KafkaError | None:
        with self._lock:
            return self._setup

    def raise_if_setup_error(self) -> None:
        error = self.setup_error()
        if error is not None:
            raise KafkaSetupError(describe_setup_error(error))
