"""``leasekeeper dlq``: list, show and replay a queue's dead letters.

Settings come from flags or their environment variables (``--bootstrap`` or
``KAFKA_BOOTSTRAP``, ``--topic-prefix`` or ``JOBS_TOPIC_PREFIX``, ...), read by
click; the flag wins, and ``--schema-path`` adds to ``JOBS_SCHEMA_PATH``. The group is a
plain ``click`` group so the leasekeeper CLI mounts it with one line, and
``python -m leasekeeper.dlq`` runs it on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jobcore.cli_env import environment, schema_path_option, topic_prefix_option
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
from jobcore.kafka import (
    KafkaException,
    KafkaSettings,
    KafkaSetupError,
    make_consumer,
    make_producer,
)
from jobcore.terminal_text import printable
from jobcore.topics import QueueTopics
from leasekeeper.dlq.entries import DeadLetterFilter, DlqEntry, parse_time_ms
from leasekeeper.dlq.reader import DlqError, MissingDlq, read_dead_letters
from leasekeeper.dlq.render import (
    detail,
    entries_table,
    location,
    render_detail,
    summary,
    to_json,
)
from leasekeeper.dlq.replay import Replayer, ReplayOptions, ReplayReport, default_group
from leasekeeper.views.id_prefix import PrefixError, resolve_prefix
from schemas.codec import EnvelopeCodec
from schemas.job import DeadLetterReason

__all__ = ["dlq"]

_F = TypeVar("_F", bound=Callable[..., Any])
_LOCATION = re.compile(r"^(\d+):(\d+)$")


@dataclass(frozen=True, kw_only=True)
class _Target:
    """The queue a command works on and how to reach and decode it."""

    kafka: KafkaSettings
    topics: QueueTopics
    codec: EnvelopeCodec


def _target(
    queue: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    schema_paths: tuple[str, ...],
    connect_timeout_s: float,
    registry_options: tuple[str | None, Path | None] = (None, None),
) -> _Target:
    env = environment()
    try:
        topics = QueueTopics(queue=queue, prefix=env.topic_prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--queue") from exc
    url, config = registry_options
    registry = schemas_for(schema_paths, url=url, config=config, prefix=env.topic_prefix)
    settings = kafka_settings(
        "leasekeeper-dlq", bootstrap=bootstrap, kafka_config=kafka_config, env=env
    )
    require_kafka(settings, connect_timeout_s)
    return _Target(kafka=settings, topics=topics, codec=EnvelopeCodec(registry))


def _queue_options(command: _F) -> _F:
    options = [
        click.option("--queue", required=True, help="the queue (dead letters on jobs.QUEUE.dlq)"),
        bootstrap_option,
        kafka_config_option,
        topic_prefix_option,
        connect_timeout_option,
        schema_path_option(),
        schema_registry_options,
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _filter_options(command: _F) -> _F:
    options = [
        click.option("--type", "job_type", default=None, help="only this job type"),
        click.option("--tenant", default=None, help="only this tenant"),
        click.option("--error-class", default=None, help="only jobs whose last attempt raised it"),
        click.option(
            "--reason",
            default=None,
            callback=_reason,
            metavar="REASON",
            help="only this reason: "
            + ", ".join(r.value for r in DeadLetterReason)
            + " (a unique prefix will do, e.g. permanent)",
        ),
        click.option("--since", default=None, help="died at or after (ISO 8601; UTC if no zone)"),
        click.option("--until", default=None, help="died before (ISO 8601; UTC if no zone)"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _reason(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A dead-letter reason, spelled loosely (``permanent``, ``attempts-exhausted``):
    a value that matches no reason would list nothing and look like an empty DLQ."""
    if value is None:
        return None
    wanted = " ".join(value.strip().lower().replace("-", " ").replace("_", " ").split())
    matches = [r.value for r in DeadLetterReason if r.value.startswith(wanted)] if wanted else []
    if len(matches) == 1 or wanted in matches:
        return wanted if wanted in matches else matches[0]
    choices = ", ".join(repr(r.value) for r in DeadLetterReason)
    raise click.BadParameter(f"{value!r} is not a dead-letter reason; use one of {choices}")


def _selection(
    job_type: str | None,
    tenant: str | None,
    error_class: str | None,
    reason: str | None,
    since: str | None,
    until: str | None,
) -> DeadLetterFilter:
    return DeadLetterFilter(
        type=job_type,
        tenant=tenant,
        error_class=error_class,
        reason=reason,
        since_ms=_time_ms(since, "--since"),
        until_ms=_time_ms(until, "--until"),
    )


def _time_ms(text: str | None, flag: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_time_ms(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from exc


@contextmanager
def _dlq_errors(settings: KafkaSettings) -> Iterator[None]:
    """One line, no traceback, for a DLQ problem or a Kafka that refused or did not
    answer (the credential problem a client reported, when there is one)."""
    try:
        yield
    except MissingDlq as exc:
        raise SetupMistake(str(exc)) from None
    except DlqError as exc:
        raise click.ClickException(str(exc)) from exc
    except (KafkaException, KafkaSetupError, TimeoutError) as exc:
        raise kafka_failure(exc, settings) from None


@click.group(name="dlq", cls=FriendlyGroup)
def dlq() -> None:
    """Search, inspect and replay a queue's dead letters (jobs.QUEUE.dlq)."""


@dlq.command("list")
@_queue_options
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="one JSON object per line")
@click.option("--wide", is_flag=True, help="tenant and reason in columns of their own")
def list_command(
    queue: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    schema_paths: tuple[str, ...],
    schema_registry: str | None,
    schema_registry_config: Path | None,
    as_json: bool,
    wide: bool,
    **filters: str | None,
) -> None:
    """List the dead letters of QUEUE, optionally filtered."""
    selection = _selection(**filters)  # a bad filter fails before Kafka is asked
    target = _target(
        queue,
        bootstrap,
        kafka_config,
        schema_paths,
        connect_timeout_s,
        (schema_registry, schema_registry_config),
    )
    with _dlq_errors(target.kafka):
        entries = list(read_dead_letters(target.kafka, target.topics.dlq, target.codec, selection))
    entries.sort(key=_died_first)
    if as_json:
        for entry in entries:
            click.echo(to_json(summary(entry)))
        return
    console = Console()
    console.print(entries_table(entries, title=target.topics.dlq, wide=wide))
    console.print(f"{len(entries)} dead letters" + ("" if selection.is_empty else " match"))


def _died_first(entry: DlqEntry) -> tuple[int, int, int]:
    died = entry.letter.died_at_ms if entry.letter is not None else 0
    return (died, entry.partition, entry.offset)


@dlq.command("show")
@click.argument("job_id")
@_queue_options
@click.option("--json", "as_json", is_flag=True, help="the full record as JSON")
def show(
    job_id: str,
    queue: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    schema_paths: tuple[str, ...],
    schema_registry: str | None,
    schema_registry_config: Path | None,
    as_json: bool,
) -> None:
    """Everything about one dead letter: JOB_ID (or a unique prefix of 8+ characters),
    or PARTITION:OFFSET for an undecodable one.

    A job that died more than once (replayed, then dead again) shows every time.
    """
    target = _target(
        queue,
        bootstrap,
        kafka_config,
        schema_paths,
        connect_timeout_s,
        (schema_registry, schema_registry_config),
    )
    with _dlq_errors(target.kafka):
        entries = list(read_dead_letters(target.kafka, target.topics.dlq, target.codec))
    entries = _entries_named(entries, job_id)
    if not entries:
        raise click.ClickException(f"no dead letter {job_id} in {target.topics.dlq}")
    console = Console()
    for entry in entries:
        record = detail(entry, target.codec)
        if as_json:
            click.echo(to_json(record))
        else:
            render_detail(record, console)


def _entries_named(entries: list[DlqEntry], given: str) -> list[DlqEntry]:
    """The entries ``given`` names: a ``PARTITION:OFFSET``, a job id, or a unique
    prefix of one (ids are long; a table shows them whole so they can be pasted)."""
    if _LOCATION.match(given):
        return [entry for entry in entries if location(entry) == given]
    ids = (entry.job.job_id for entry in entries if entry.job is not None)
    try:
        job_id = resolve_prefix(ids, given)
    except PrefixError as exc:
        raise click.ClickException(str(exc)) from None
    return [entry for entry in entries if entry.job is not None and entry.job.job_id == job_id]


@dlq.command("replay")
@_queue_options
@_filter_options
@click.option("--dry-run", is_flag=True, help="show what would be replayed; change nothing")
@click.option("--group", default=None, help="consumer group keeping the replay's progress")
@click.option("--json", "as_json", is_flag=True, help="with --dry-run: JSON lines")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None, hidden=True)
def replay(
    queue: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
    schema_paths: tuple[str, ...],
    schema_registry: str | None,
    schema_registry_config: Path | None,
    dry_run: bool,
    group: str | None,
    as_json: bool,
    rate: float | None,
    **filters: str | None,
) -> None:
    """Enqueue the selected dead letters of QUEUE again, with their original job ids.

    Attempts restart at 0 and replay_count goes up by one; the error history is
    kept. Progress is committed to a consumer group, only past records whose
    replayed job Kafka acknowledged: an interrupted replay is simply run again.
    The default group is dlq-replay.jobs.QUEUE, plus a fingerprint of the
    filters when there are any, so each selection keeps its own progress.
    """
    selection = _selection(**filters)  # a bad filter fails before Kafka is asked
    target = _target(
        queue,
        bootstrap,
        kafka_config,
        schema_paths,
        connect_timeout_s,
        (schema_registry, schema_registry_config),
    )
    options = ReplayOptions(
        topics=target.topics,
        selection=selection,
        group=group or default_group(target.topics, selection),
        dry_run=dry_run,
        rate=rate,
    )
    with _dlq_errors(target.kafka):
        report = _run_replay(target, options)
    _print_report(report, target, as_json)
    if not report.ok:
        raise click.ClickException(f"{len(report.failed)} dead letters were not replayed")


def _run_replay(target: _Target, options: ReplayOptions) -> ReplayReport:
    consumer = make_consumer(target.kafka, options.group)
    producer = None if options.dry_run else make_producer(target.kafka)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    try:
        with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True)) as progress:
            task = progress.add_task("scanning", total=None)

            def on_progress(report: ReplayReport) -> None:
                verb = "would replay" if report.dry_run else "replayed"
                count = len(report.selected) if report.dry_run else report.replayed
                progress.update(
                    task,
                    total=report.to_scan,
                    completed=report.scanned,
                    description=f"{verb} {count}",
                )

            replayer = Replayer(
                consumer=consumer,
                producer=producer,
                codec=target.codec,
                options=options,
                on_progress=on_progress,
            )
            return replayer.run()
    finally:
        consumer.close()
        if producer is not None:
            producer.flush(10)


def _print_report(report: ReplayReport, target: _Target, as_json: bool) -> None:
    if report.dry_run:
        if as_json:
            for entry in report.selected:
                click.echo(to_json(summary(entry)))
        else:
            Console().print(entries_table(report.selected, title="would replay"))
    for entry in report.undecodable:
        click.echo(f"skipped undecodable dead letter {location(entry)}: {printable(entry.problem)}")
    for failure in report.failed:
        click.echo(f"not replayed: {printable(failure)}", err=True)
    replayed = len(report.selected) if report.dry_run else report.replayed
    click.echo(
        f"{'dry run: would replay' if report.dry_run else 'replayed'} {replayed} to "
        f"{target.topics.ready}; {report.not_matching} not matching, "
        f"{len(report.undecodable)} undecodable, {report.scanned} read (group {report.group})"
    )
