"""``producer enqueue``'s one send, and what it says when it is cut short.

A person who presses Ctrl-C while ``enqueue`` waits must learn whether the job
went out: enqueueing it again when it did runs it twice, and not when it did
not loses it. Before the job reaches the client nothing was sent; after, the
producer's close delivers what it holds (or gives up), and the job's future
then says which.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from concurrent.futures import Future

import click

from jobcore.cli_kafka import require_kafka
from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaSettings
from producer.api import JobProducer
from producer.errors import EnqueueError
from producer.request import JobRequest
from schemas.codec import SchemaRegistry

__all__ = ["Interrupted", "parse_payload", "send"]


class Interrupted(click.ClickException):
    """Ctrl-C: exit 130, as a shell reports SIGINT, with whether the job was sent."""

    exit_code = 130


def send(
    settings: KafkaSettings,
    registry: SchemaRegistry,
    request: JobRequest,
    *,
    prefix: str,
    tiers: DelayTiers,
    connect_timeout_s: float,
) -> str:
    """Enqueue ``request`` and wait for the broker's acknowledgement; its id."""
    future: Future[str] | None = None
    waiting = False
    try:
        require_kafka(settings, connect_timeout_s)
        with JobProducer(settings, registry=registry, prefix=prefix, tiers=tiers) as producer:
            future = producer.enqueue_nowait(request)
            try:
                return future.result()
            except KeyboardInterrupt:
                waiting = True  # the close below delivers the job or gives up on it
                raise
    except KeyboardInterrupt:
        raise Interrupted(interrupted(future)) from None
    except EnqueueError:
        if waiting:  # closing after Ctrl-C gave up on the job
            raise Interrupted(interrupted(future)) from None
        raise


def interrupted(future: Future[str] | None) -> str:
    """Whether the job was sent, as far as this process can know."""
    if future is None:
        return "interrupted before the job was handed to Kafka: it was not sent"
    if not future.done():
        return (
            "interrupted while Kafka had not yet acknowledged the job: it may or may not "
            "have arrived; `producer status` with its id, or the queue, will tell"
        )
    error = future.exception()
    if error is None:
        return f"interrupted, but Kafka had acknowledged job {future.result()}: it was sent"
    ids = ", ".join(getattr(error, "failures", {})) or "the job"
    return (
        f"interrupted before Kafka acknowledged {ids}: it was probably not sent "
        f"({error}); `producer status` with its id tells for sure"
    )


def parse_payload(text: str) -> Mapping[str, object]:
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--payload is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise ValueError(f"--payload must be a JSON object, got {type(payload).__name__}")
    return payload
