"""``producer result``: print a job's return value, waiting for it to end.

The value is printed as JSON on stdout (``null`` when the handler returned none).
Each way of having no value exits with its own code (``ResultExit``), beside every
command's 1 (failure), 2 (setup mistake) and 3 (Kafka unreachable).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from enum import IntEnum
from pathlib import Path

import click

from jobcore.cli_env import environment, schema_path_option, topic_prefix_option
from jobcore.cli_kafka import (
    bootstrap_option,
    connect_timeout_option,
    kafka_config_option,
    kafka_failure,
    kafka_settings,
    require_kafka,
)
from jobcore.durations import DURATION, shown
from jobcore.kafka import KafkaException
from jobcore.results import ResultUndecodable
from jobcore.terminal_text import printable
from jobcore.topics import QueueTopics
from producer.cli_args import QUEUE_HELP, queue_and_arguments
from producer.results import (
    JobCancelled,
    JobDied,
    JobUnknown,
    ResultError,
    ResultReadError,
    ResultTimeout,
    wait_for_result,
)
from schemas.codec import SchemaError, SchemaRegistry

__all__ = ["ResultExit", "result_command"]


class ResultExit(IntEnum):
    """``producer result`` exit codes (documented in docs/workers.md, "Results")."""

    VALUE = 0
    DIED = 4
    CANCELLED = 5
    UNKNOWN = 6
    TIMEOUT = 7


_EXITS: tuple[tuple[type[ResultError], ResultExit], ...] = (
    (JobDied, ResultExit.DIED),
    (JobCancelled, ResultExit.CANCELLED),
    (JobUnknown, ResultExit.UNKNOWN),
    (ResultTimeout, ResultExit.TIMEOUT),
)


@click.command("result", short_help="Print a job's return value, waiting for it to end.")
@click.argument("words", nargs=-1, metavar="[QUEUE] JOB_ID")
@click.option("--queue", "queue_flag", default=None, help=QUEUE_HELP)
@click.option(
    "--wait",
    type=DURATION,
    default=shown(30.0),
    show_default=True,
    help="How long to wait for the job to end (30s, 2m; 0: only look).",
)
@click.option(
    "--window",
    type=DURATION,
    default=None,
    help="How far back to look for a result [default: the results topic's retention, the "
    "queue's --status-retention].",
)
@click.option(
    "--enqueued",
    is_flag=True,
    help="The job was enqueued: a wait that runs out exits 7 (timeout), not 6 (unknown).",
)
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@connect_timeout_option
@schema_path_option()
def result_command(
    words: tuple[str, ...],
    queue_flag: str | None,
    wait: float,
    window: float | None,
    enqueued: bool,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    schema_paths: Sequence[str],
) -> None:
    """Print the value JOB_ID of QUEUE returned, as JSON. Exits 4 when the job died (with
    its dead-letter reason), 5 when it was cancelled, 6 when no record of it was found
    (naming the window searched), 7 when it did not end within --wait (with --enqueued)."""
    queue, (job_id,) = queue_and_arguments(queue_flag, words, ("JOB_ID",))
    env = environment()
    settings = kafka_settings("producer-cli", bootstrap=bootstrap, kafka_config=kafka_config,
                              env=env)  # fmt: skip
    require_kafka(settings, connect_timeout_s)
    topics = QueueTopics(queue=queue, prefix=env.topic_prefix)
    try:
        registry = SchemaRegistry(extra_dirs=schema_paths)
    except SchemaError as exc:
        raise click.BadParameter(str(exc), param_hint="--schema-path") from None
    try:
        value = wait_for_result(settings, topics, job_id, timeout_s=wait, known=enqueued,
                                window_s=window, registry=registry)  # fmt: skip
    except ResultUndecodable as exc:
        raise click.ClickException(f"{exc} (--schema-path)") from None
    except ResultReadError as exc:
        raise kafka_failure(exc, settings) from None
    except KafkaException as exc:
        raise kafka_failure(exc, settings) from None
    except ResultError as exc:
        click.echo(printable(str(exc)), err=True)
        sys.exit(next(int(code) for kind, code in _EXITS if isinstance(exc, kind)))
    click.echo(json.dumps(value, ensure_ascii=False, default=str))
