"""``producer`` command line: create a queue's topics, enqueue (now or later) and
cancel jobs by hand.

Settings come from flags or their environment variables (``--bootstrap`` or
``KAFKA_BOOTSTRAP``, ``--topic-prefix`` or ``JOBS_TOPIC_PREFIX``, ...), read by click
(``jobcore.cli_env``), the flag winning; ``--schema-path`` adds to ``JOBS_SCHEMA_PATH``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import click

from jobcore.cli_env import (
    environment,
    priority_classes_option,
    schema_path_option,
    topic_prefix_option,
)
from jobcore.cli_errors import FriendlyGroup, SetupMistake
from jobcore.cli_kafka import (
    bootstrap_option,
    connect_timeout_option,
    kafka_config_option,
    kafka_failure,
    kafka_settings,
    require_kafka,
)
from jobcore.cli_registry import schema_registry_options, schemas_for
from jobcore.config import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT_S
from jobcore.delay_tiers import DEFAULT_TIERS, DelayTiers
from jobcore.durations import DELAY, DURATION, POSITIVE_DURATION, shown
from jobcore.kafka import KafkaException, KafkaSetupError
from jobcore.priority import PriorityClasses
from jobcore.terminal_text import printable
from jobcore.topic_admin import STATUS_RETENTION_HELP, ensure_queue_topics, retention_ms
from jobcore.topics import QueueTopics
from producer.api import CancelError, EnqueueError, JobProducer, MissingTopic
from producer.cancel import DEFAULT_WAIT_S, cancel_job
from producer.cli_args import QUEUE_HELP as _QUEUE_HELP
from producer.cli_args import queue_and_arguments
from producer.durations import parse_at
from producer.request import JobRequest
from producer.result_cli import result_command
from producer.scheduler.cli import cron
from producer.schemas_cli import schemas
from producer.sending import parse_payload, send
from producer.status_cli import iso as _iso
from producer.status_cli import status_command
from schemas.codec import EnvelopeCodec

_CLIENT_ID = "producer-cli"
_T = TypeVar("_T")


def _converter(
    parse: Callable[[str], _T],
) -> Callable[[click.Context, click.Parameter, str | None], _T | None]:
    """A click callback turning a parser's ValueError into a usage error naming the flag."""

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> _T | None:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None

    return convert


_TIERS = click.option(
    "--retry-tiers",
    "tiers",
    default=",".join(DEFAULT_TIERS),
    show_default=True,
    callback=_converter(DelayTiers.parse),
    help="Delay tiers (topics jobs.QUEUE.retry.<tier>); must be the leasekeeper's --retry-tiers.",
)


@click.group(cls=FriendlyGroup)
def main() -> None:
    """Enqueue jobs onto a Kafka-backed queue."""


main.add_command(cron)
main.add_command(schemas)
main.add_command(result_command)
main.add_command(status_command)


@main.command("enqueue", short_help="Enqueue one job; print its id.")
@click.argument("words", nargs=-1, metavar="[QUEUE] TYPE")
@click.option("--queue", "queue_flag", default=None, help=_QUEUE_HELP)
@click.option("--tenant", required=True, help="Tenant id; the partition key.")
@click.option("--payload", "payload_json", required=True, help="The payload as a JSON object.")
@click.option(
    "--dedupe-key",
    default=None,
    help=(
        "At most one job per key and tenant within the leasekeeper's --dedupe-window (24 h): "
        "a later job with the key still gets an id (printed) but is skipped, never run; "
        "`leasekeeper inspect job ID` then names the job that ran."
    ),
)
@click.option(
    "--priority",
    default=None,
    metavar="CLASS",
    help=(
        "Priority class: critical, default or bulk (or as --priority-classes names them); "
        "each class has its own topic and dispatch weight."
    ),
)
@click.option(
    "--delay",
    type=DELAY,
    default=None,
    help="Run no earlier than this from now: 90s, 10m, 2h, 3d, or plain seconds.",
)
@click.option(
    "--at",
    "run_at",
    callback=_converter(parse_at),
    metavar="ISO8601",
    help="Run no earlier than this instant, with its offset: 2030-01-01T09:00:00Z.",
)
@_TIERS
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_ATTEMPTS,
    show_default=True,
    help="Attempts before the job is dead-lettered.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=POSITIVE_DURATION,
    default=shown(DEFAULT_TIMEOUT_S),
    show_default=True,
    help="How long one attempt may run (30s, 5m).",
)
@click.option(
    "--ordering-key",
    default=None,
    metavar="KEY",
    help="Jobs of this queue and tenant with the same key run one at a time, in enqueue "
    "order (e.g. user-42); see docs/ordering.md.",
)
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@connect_timeout_option
@schema_path_option()
@schema_registry_options
@priority_classes_option
def enqueue(
    words: tuple[str, ...],
    queue_flag: str | None,
    payload_json: str,
    tenant: str,
    dedupe_key: str | None,
    priority: str | None,
    delay: float | None,
    run_at: datetime | None,
    tiers: DelayTiers,
    max_attempts: int,
    timeout_s: float,
    ordering_key: str | None,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    schema_paths: Sequence[str],
    schema_registry: str | None,
    schema_registry_config: Path | None,
    priority_classes: PriorityClasses,
) -> None:
    """Enqueue a TYPE job on QUEUE (--queue, or the first argument); print its id once
    Kafka acknowledged it.

    The payload is validated against TYPE's schema first; an invalid one exits
    with the offending field named and nothing sent. With --delay or --at the job
    waits in a delay tier until then (at most 30 days ahead).
    """
    if delay is not None and run_at is not None:
        raise click.UsageError("give --delay or --at, not both")
    queue, (job_type,) = queue_and_arguments(queue_flag, words, ("TYPE",))
    env = environment()
    registry = schemas_for(
        schema_paths,
        url=schema_registry,
        config=schema_registry_config,
        prefix=env.topic_prefix,
        queues=[queue],
    )
    try:
        request = JobRequest(
            queue=queue,
            type=job_type,
            payload=parse_payload(payload_json),
            tenant_id=tenant,
            dedupe_key=dedupe_key,
            run_at=run_at,
            delay=None if delay is None else timedelta(seconds=delay),
            priority=priority,
            max_attempts=max_attempts,
            timeout_s=timeout_s,
            ordering_key=ordering_key,
        )
        if priority is not None:
            priority_classes.check(priority)
        # Checked before connecting: a bad payload fails fast, even with no broker.
        EnvelopeCodec(registry).validate_payload(request.type, request.payload)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    settings = kafka_settings(_CLIENT_ID, bootstrap=bootstrap, kafka_config=kafka_config, env=env)
    try:
        job_id = send(
            settings,
            registry,
            request,
            prefix=env.topic_prefix,
            tiers=tiers,
            connect_timeout_s=connect_timeout_s,
        )
    except MissingTopic as exc:
        raise SetupMistake(str(exc)) from None
    except (ValueError, EnqueueError, KafkaException, KafkaSetupError) as exc:
        raise kafka_failure(exc, settings) from None
    click.echo(job_id)


@main.command("cancel", short_help="Cancel a job, unless it already ended; say which case applied.")
@click.argument("words", nargs=-1, metavar="[QUEUE] JOB_ID")
@click.option("--queue", "queue_flag", default=None, help=_QUEUE_HELP)
@click.option("--reason", default="", help="Why; kept with the cancellation.")
@click.option(
    "--wait",
    "wait_s",
    type=DURATION,
    default=shown(DEFAULT_WAIT_S),
    show_default=True,
    help="How long to wait for a leasekeeper to answer for the cancellation (10s, 1m).",
)
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@connect_timeout_option
def cancel(
    words: tuple[str, ...],
    queue_flag: str | None,
    reason: str,
    wait_s: float,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
) -> None:
    """Cancel JOB_ID of QUEUE, and say which case applied (from jobs.QUEUE.status).

    \b
    Exit codes:
      0  cancelled while it waited (ready or delayed): it will not run; or, for a
         queue without a status topic, the cancellation was recorded
      4  cancelled while it ran: its lease ended (the handler may have done part of its work)
      5  not cancelled: it already succeeded or died (the answer says when)
      6  not found yet: the cancellation is recorded, and the job is skipped if it
         appears within 35 days
      1, 2, 3  nothing was recorded (an error, a setup mistake, Kafka unreachable)
    """
    queue, (job_id,) = queue_and_arguments(queue_flag, words, ("JOB_ID",))
    env = environment()
    settings = kafka_settings(_CLIENT_ID, bootstrap=bootstrap, kafka_config=kafka_config, env=env)
    topics = QueueTopics(queue=queue, prefix=env.topic_prefix)
    require_kafka(settings, connect_timeout_s)
    try:
        with JobProducer(settings, prefix=env.topic_prefix) as producer:
            answer = cancel_job(settings, producer, topics, job_id, reason=reason, wait_s=wait_s)
    except CancelError as exc:
        if isinstance(exc.__cause__, MissingTopic):
            raise SetupMistake(str(exc)) from None
        raise kafka_failure(exc, settings) from None
    except (ValueError, EnqueueError, KafkaException, KafkaSetupError) as exc:
        raise kafka_failure(exc, settings) from None
    click.echo(printable(answer.message(_iso)))
    sys.exit(answer.exit_code)


@main.command("create-queue", short_help="Create a queue's topics.")
@click.argument("words", nargs=-1, metavar="[QUEUE]")
@click.option("--queue", "queue_flag", default=None, help=_QUEUE_HELP)
@click.option("--partitions", type=click.IntRange(min=1), required=True)
@click.option("--replication", type=int, default=-1, help="Default: the broker's default.")
@_TIERS
@click.option("--status-retention", type=DURATION, default=None, help=STATUS_RETENTION_HELP)
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@connect_timeout_option
@priority_classes_option
def create_queue(
    words: tuple[str, ...],
    queue_flag: str | None,
    partitions: int,
    replication: int,
    tiers: DelayTiers,
    status_retention: float | None,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    priority_classes: PriorityClasses,
) -> None:
    """Create QUEUE's ready, delay-tier and dead-letter topics (and its control
    topics); print their names.

    A no-op when they already exist with the same partition count; missing ones
    are added.
    """
    queue, _ = queue_and_arguments(queue_flag, words, ())
    if status_retention is not None and status_retention <= 0:
        raise click.BadParameter("must be more than 0", param_hint="--status-retention")
    env = environment()
    settings = kafka_settings(_CLIENT_ID, bootstrap=bootstrap, kafka_config=kafka_config, env=env)
    require_kafka(settings, connect_timeout_s)
    try:
        names = ensure_queue_topics(
            settings,
            queue,
            partitions=partitions,
            prefix=env.topic_prefix,
            replication=replication,
            tiers=tiers,
            classes=priority_classes,
            status_retention_ms=retention_ms(status_retention),
        )
    except (ValueError, RuntimeError, KafkaException, KafkaSetupError) as exc:
        raise kafka_failure(exc, settings) from None
    for name in names:
        click.echo(name)


def _outbox_commands() -> click.Command:
    """``producer outbox``; a hint when psycopg (the ``outbox`` extra) is not installed."""
    try:
        from producer.outbox.cli import outbox
    except ImportError as exc:
        problem = str(exc)

        @click.command("outbox", context_settings={"ignore_unknown_options": True})
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def missing(args: Sequence[str]) -> None:
            """Transactional enqueue (needs the outbox extra)."""
            raise click.ClickException(
                f"producer outbox needs psycopg 3 ({problem}); install it: "
                "pip install 'kafka-lease-queue[outbox]'"
            )

        return missing
    return outbox


main.add_command(_outbox_commands())
