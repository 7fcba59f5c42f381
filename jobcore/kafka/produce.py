"""Every send path (enqueue, the outbox relay, the leasekeeper's copies and statuses)
sorts a failed produce into the same few outcomes, so none of them drops or
resolves a record that a retry or an operator could still deliver; the policy
(retry, shrink, hold) stays with each caller."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

DeliveryCallback = Callable[[KafkaError | None, Message], None]


def is_retriable(error: KafkaError) -> bool:
    """Transient errors are retried; fatal ones (authorization, _FATAL) are raised."""
    if error.fatal():
        return False
    return bool(error.retriable()) or error.code() in (
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._MSG_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
    )


class ProduceFailure(StrEnum):
    """What a failed produce means for the record: the one vocabulary of send policies."""

    TRANSIENT = "transient"  # send it again after a backoff
    TOO_LARGE = "too large"  # the same bytes will never fit: send something smaller
    BLOCKED = "blocked"  # unauthorised, unknown topic, fatal: needs an operator


_TOO_LARGE = frozenset(
    code
    for code in (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        # Older clients name the local check separately.
        getattr(KafkaError, "_MSG_SIZE_TOO_LARGE", None),
    )
    if code is not None
)
_BLOCKED = frozenset(
    (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    )
)


def classify_produce_error(error: KafkaError) -> ProduceFailure:
    """Sort a produce error (raised by ``produce()`` or in a delivery report) into what
    to do next. Anything neither too large nor transient counts as blocked: holding a
    record and alerting is safe, dropping or resolving it would lose a job."""
    code = error.code()
    if code in _TOO_LARGE:
        return ProduceFailure.TOO_LARGE
    if code in _BLOCKED or error.fatal():
        return ProduceFailure.BLOCKED
    if code == KafkaError._QUEUE_FULL or is_retriable(error):
        return ProduceFailure.TRANSIENT
    return ProduceFailure.BLOCKED


class ProduceError(Exception):
    """``produce()`` refused a record before sending it (too large for the producer,
    unknown topic, local queue full), classified."""

    def __init__(self, failure: ProduceFailure, text: str) -> None:
        super().__init__(text)
        self.failure = failure


ProduceCallback = Callable[[ProduceFailure | None, str], None]  # None: the record is durable


def produce_once(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
    on_delivery: ProduceCallback,
    partition: int | None = None,
    on_offset: Callable[[int], None] | None = None,
) -> None:
    """Produce one record without waiting or retrying: ``on_delivery(None, "")`` on
    success, ``on_delivery(failure, text)`` on a failed delivery report, and
    ``ProduceError`` when ``produce()`` refuses it at once. The caller owns the policy.
    ``partition`` pins the record's partition; ``on_offset`` hears where a delivered
    record landed, before ``on_delivery``."""

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            if on_offset is not None:
                offset = msg.offset()
                on_offset(-1 if offset is None else offset)
            on_delivery(None, "")
        else:
            on_delivery(classify_produce_error(err), f"{err.name()}: {err.str()}")

    kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
    if headers:
        kwargs["headers"] = headers
    if partition is not None:
        kwargs["partition"] = partition
    try:
        producer.produce(topic, **kwargs)
    except BufferError as exc:
        raise ProduceError(ProduceFailure.TRANSIENT, f"local producer queue full: {exc}") from exc
    except KafkaException as exc:
        err = exc.args[0]
        if not isinstance(err, KafkaError):
            raise
        raise ProduceError(classify_produce_error(err), f"{err.name()}: {err.str()}") from exc


def produce_reliably(
    producer: Producer,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]] | None = None,
    partition: int | None = None,
    on_delivery: DeliveryCallback | None = None,
) -> None:
    """Produce one record (``value`` None: a tombstone), serving delivery reports while
    the local queue is full."""
    kwargs: dict[str, Any] = {"key": key, "value": value}
    if headers:
        kwargs["headers"] = headers
    if partition is not None:
        kwargs["partition"] = partition
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    while True:
        try:
            producer.produce(topic, **kwargs)
            producer.poll(0)
            return
        except BufferError:
            producer.poll(0.05)
