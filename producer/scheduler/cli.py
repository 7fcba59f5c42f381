"""``producer cron run`` and ``producer cron list``.

Settings: the ``[scheduler]`` table of the config file, overridden by flags;
Kafka and topic prefix from flags or their environment variables, as for every
``producer`` command.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import click

from jobcore.cli_env import environment, schema_path_option, topic_prefix_option
from jobcore.cli_errors import log_level_option
from jobcore.cli_kafka import bootstrap_option, kafka_config_option, kafka_settings
from jobcore.cli_registry import schema_registry_options, schemas_for
from jobcore.config import Environment
from jobcore.durations import DURATION
from jobcore.kafka import KafkaException
from producer.scheduler.config import CronConfig, load_config
from producer.scheduler.listing import list_rows, render_rows
from producer.scheduler.service import Scheduler, check_payload
from producer.scheduler.state import LastFire, read_last_fires
from schemas.codec import EnvelopeCodec, SchemaRegistry

__all__ = ["cron"]

_CLIENT_ID = "producer-cron"
_CONFIG = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TOML file with [[cron]] entries (and an optional [scheduler] table).",
)
_SCHEMA_PATH = schema_path_option()
_GROUP = click.option(
    "--group",
    default=None,
    help="Scheduler name: schedulers sharing it elect one leader [default: from the file, "
    "else 'default'].",
)


@click.group()
def cron() -> None:
    """Cron entries: fired by one leader among any number of schedulers."""


@cron.command("run", short_help="Run a scheduler until SIGTERM or Ctrl-C.")
@_CONFIG
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@_GROUP
@click.option(
    "--session-timeout-ms",
    type=click.IntRange(min=1),
    default=None,
    help="How long a dead leader goes unnoticed [default: from the file, else 6000].",
)
@click.option(
    "--misfire-grace",
    "misfire_grace_s",
    type=DURATION,
    default=None,
    help="How late a fire may be before it counts as missed (90s, 2m) [default: from the "
    "file, else 60s].",
)
@_SCHEMA_PATH
@log_level_option()
@schema_registry_options
def run(
    config_path: Path,
    bootstrap: str | None,
    kafka_config: Path | None,
    group: str | None,
    session_timeout_ms: int | None,
    misfire_grace_s: float | None,
    schema_paths: Sequence[str],
    log_level: str,
    schema_registry: str | None,
    schema_registry_config: Path | None,
) -> None:
    """Take part in the leader election of the scheduler group; while leader, enqueue
    every entry of the config file at its fire times (each fire is logged)."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    env = environment()
    try:
        config = _load(config_path, env, group)
        options = config.options
        if session_timeout_ms is not None:
            options = dataclasses.replace(options, session_timeout_ms=session_timeout_ms)
        if misfire_grace_s is not None:
            if misfire_grace_s < 1:
                raise click.BadParameter(
                    f"{misfire_grace_s:g}s is too short: at least 1s", param_hint="--misfire-grace"
                )
            options = dataclasses.replace(options, misfire_grace_s=misfire_grace_s)
        scheduler = Scheduler(
            kafka_settings(_CLIENT_ID, bootstrap=bootstrap, kafka_config=kafka_config, env=env),
            options=options,
            entries=config.entries,
            registry=schemas_for(
                schema_paths,
                url=schema_registry,
                config=schema_registry_config,
                prefix=env.topic_prefix,
                queues=sorted({entry.queue for entry in config.entries}),
            ),
        )
    except ValueError as exc:
        raise click.ClickException(f"{config_path}: {exc}") from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo(
        f"cron scheduler {options.name}: {len(config.entries)} entries, group {options.group}",
        err=True,
    )
    try:
        scheduler.run(stop)
    except (KafkaException, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("cron scheduler stopped", err=True)


@cron.command("list", short_help="Show entries, next fires and last fires.")
@_CONFIG
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@_GROUP
@_SCHEMA_PATH
def list_entries(
    config_path: Path,
    bootstrap: str | None,
    kafka_config: Path | None,
    group: str | None,
    schema_paths: Sequence[str],
) -> None:
    """A table of the entries in the config file: schedule, zone, the next fire in the
    entry's zone and in UTC, and the last fire recorded in Kafka.

    Entries are checked as ``cron run`` checks them: a payload its type's schema
    refuses fails here too."""
    env = environment()
    codec = EnvelopeCodec(SchemaRegistry(extra_dirs=schema_paths))
    try:
        config = _load(config_path, env, group)
        for entry in config.entries:
            check_payload(codec, entry)
    except ValueError as exc:
        raise click.ClickException(f"{config_path}: {exc}") from exc
    last_fires: dict[str, LastFire] | None
    try:
        settings = kafka_settings(
            _CLIENT_ID, bootstrap=bootstrap, kafka_config=kafka_config, env=env
        )
        last_fires = read_last_fires(settings, config.options, timeout=10)
    except (KafkaException, TimeoutError) as exc:
        click.echo(f"cannot read the last fires from Kafka: {exc}", err=True)
        last_fires = None
    render_rows(list_rows(config.entries, last_fires, datetime.now(UTC)))


def _load(path: Path, env: Environment, group: str | None) -> CronConfig:
    config = load_config(path, prefix=env.topic_prefix)
    if group is None:
        return config
    return dataclasses.replace(config, options=dataclasses.replace(config.options, name=group))
