"""``producer status``: where a job is, or how it ended, from the status topic or the
dashboard; a succeeded job's result with it."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import click

from jobcore.cli_env import (
    dashboard_token_option,
    environment,
    schema_path_option,
    topic_prefix_option,
)
from jobcore.cli_kafka import (
    bootstrap_option,
    connect_timeout_option,
    kafka_config_option,
    kafka_failure,
    kafka_settings,
    require_kafka,
)
from jobcore.kafka import KafkaException
from producer.cli_args import QUEUE_HELP, queue_and_arguments
from producer.lookup import NOT_FOUND, NOT_SEEN
from producer.lookup import JobLookupError as LookupFailed
from producer.lookup import lookup as job_lookup
from producer.status import StatusError
from schemas.codec import SchemaError, SchemaRegistry

__all__ = ["iso", "status_command"]

_CLIENT_ID = "producer-cli"


def iso(at_ms: int) -> str:
    """A time for people: ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@click.command("status", short_help="Where a job is, or how it ended.")
@click.argument("words", nargs=-1, metavar="[QUEUE] JOB_ID")
@click.option("--queue", "queue_flag", default=None, help=QUEUE_HELP)
@click.option(
    "--dashboard",
    default=None,
    help="ask `leasekeeper dashboard` at this URL (live leases too); "
    "else read jobs.QUEUE.status (finished jobs only)",
)
@dashboard_token_option("The dashboard's token, for --dashboard.")
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@connect_timeout_option
@schema_path_option()
def status_command(
    words: tuple[str, ...],
    queue_flag: str | None,
    dashboard: str | None,
    dashboard_token: str | None,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    schema_paths: Sequence[str],
) -> None:
    """Say where JOB_ID of QUEUE is (leased, with its worker) or how it ended (succeeded,
    dead, cancelled, skipped as a duplicate), naming the source. Exits 1 when not found."""
    queue, (job_id,) = queue_and_arguments(queue_flag, words, ("JOB_ID",))
    env = environment()
    settings = kafka_settings(_CLIENT_ID, bootstrap=bootstrap, kafka_config=kafka_config, env=env)
    if not dashboard:
        require_kafka(settings, connect_timeout_s)
    try:
        registry = SchemaRegistry(extra_dirs=schema_paths)  # to show an Avro result
    except SchemaError as exc:
        raise click.BadParameter(str(exc), param_hint="--schema-path") from None
    try:
        found = job_lookup(
            settings,
            queue,
            job_id,
            prefix=env.topic_prefix,
            dashboard=dashboard,
            token=dashboard_token or None,
            registry=registry,
        )
    except LookupFailed as exc:
        raise click.ClickException(f"{exc} (check --dashboard)") from None
    except (StatusError, KafkaException) as exc:
        raise kafka_failure(exc, settings) from None
    for line in found.lines(iso):
        click.echo(line)
    sys.exit(0 if found.state not in (NOT_FOUND, NOT_SEEN) else 1)
