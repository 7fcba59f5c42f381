"""``producer outbox``: create the outbox tables, relay staged jobs to Kafka, and
handle the rows the relay set aside (``dead``)."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import click
import psycopg

from jobcore.cli_env import environment, schema_path_option, topic_prefix_option
from jobcore.cli_errors import log_level_option
from jobcore.cli_kafka import bootstrap_option, kafka_config_option, kafka_failure, kafka_settings
from jobcore.delay_tiers import DEFAULT_TIERS, DelayTiers
from jobcore.durations import POSITIVE_DURATION, shown
from jobcore.kafka import KafkaException, KafkaSettings, KafkaSetupError
from jobcore.live_topic import LivePublisher, default_instance
from producer.api import EnqueueError, JobProducer
from producer.outbox.dead_cli import dead
from producer.outbox.dsn import dsn_option, dsn_source
from producer.outbox.failures import OnDead
from producer.outbox.metrics import serve_metrics
from producer.outbox.relay import OutboxRelay, RelayConfig
from producer.outbox.report import RelayReporter, database_of, report_publisher
from producer.outbox.schema import init_schema
from schemas.codec import SchemaRegistry


@click.group()
def outbox() -> None:
    """Enqueue in the application's own transaction through a job_outbox table."""


outbox.add_command(dead)


@outbox.command("init", short_help="Create the job_outbox tables, index and trigger.")
@dsn_option
def init(dsn: str) -> None:
    """Create job_outbox and job_outbox_dead (safe to run again, and how an existing
    outbox gets the tables a newer relay needs). The same SQL ships as
    producer/outbox/schema.sql for migration tools."""
    try:
        init_schema(dsn)
    except psycopg.Error as exc:
        raise click.ClickException(_db_problem(dsn, exc)) from None
    click.echo("job_outbox ready")


@outbox.command("relay", short_help="Move staged jobs to Kafka (one active, others standby).")
@dsn_option
@click.option("--batch", type=click.IntRange(min=1), default=500, show_default=True)
@click.option(
    "--poll-interval",
    type=POSITIVE_DURATION,
    default=shown(1.0),
    show_default=True,
    help="How long between checks without a NOTIFY, and between standby lock attempts (1s, 500ms).",
)
@click.option(
    "--retry-tiers",
    "tiers",
    default=",".join(DEFAULT_TIERS),
    show_default=True,
    help="Delay tiers; must be the leasekeeper's --retry-tiers.",
)
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus metrics here.")
@click.option(
    "--publish-interval",
    type=POSITIVE_DURATION,
    default=shown(3.0),
    show_default=True,
    help="How often to report rows waiting and the lag to the dashboard's "
    "PREFIX._outbox_relays topic (3s, 500ms).",
)
@click.option(
    "--missing-topic-grace",
    type=POSITIVE_DURATION,
    default=shown(600.0),
    show_default=True,
    help="How long a row whose topic does not exist waits (its tenant backs off) before "
    "it is set aside in job_outbox_dead (10m, 30s).",
)
@click.option(
    "--on-dead",
    type=click.Choice([o.value for o in OnDead]),
    default=OnDead.BLOCK.value,
    show_default=True,
    help="block: later rows of a dead row's ordering key wait for `producer outbox dead "
    "retry` or `drop`; continue: the key goes on without it.",
)
@click.option(
    "--lock-timeout",
    type=POSITIVE_DURATION,
    default=shown(10.0),
    show_default=True,
    help="The database ends the session of a relay silent this long (stopped, its host "
    "or network gone), so a standby takes over within this plus --poll-interval; at "
    "least 1s (10s, 5s).",
)
@schema_path_option()
@log_level_option()
@bootstrap_option
@kafka_config_option
@topic_prefix_option
def relay(
    dsn: str,
    batch: int,
    poll_interval: float,
    tiers: str,
    metrics_port: int | None,
    publish_interval: float,
    missing_topic_grace: float,
    on_dead: str,
    lock_timeout: float,
    schema_paths: Sequence[str],
    log_level: str,
    bootstrap: str | None,
    kafka_config: Path | None,
) -> None:
    """Relay committed job_outbox rows to Kafka in staging order until SIGTERM."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    _check_database(dsn)
    env = environment()
    settings = kafka_settings(
        "outbox-relay", bootstrap=bootstrap, kafka_config=kafka_config, env=env
    )
    registry = SchemaRegistry(extra_dirs=schema_paths)
    try:
        delay_tiers = DelayTiers.parse(tiers)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--retry-tiers") from None
    try:
        config = RelayConfig(
            dsn=dsn,
            batch=batch,
            poll_interval_s=poll_interval,
            missing_topic_grace_s=missing_topic_grace,
            on_dead=OnDead(on_dead),
            lock_timeout_s=lock_timeout,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        with JobProducer(
            settings, registry=registry, prefix=env.topic_prefix, tiers=delay_tiers
        ) as producer:
            relay = OutboxRelay(config, producer, settings, registry=registry)
            report = _report(relay, dsn, settings, env.topic_prefix, publish_interval)
            _serve(relay, dsn, metrics_port, report)
    except (EnqueueError, KafkaException, KafkaSetupError) as exc:
        raise kafka_failure(exc, settings) from None


def _report(
    relay: OutboxRelay, dsn: str, settings: KafkaSettings, prefix: str, interval_s: float
) -> LivePublisher:
    """The thread reporting this relay's backlog to the dashboard's topic."""
    instance = default_instance()
    reporter = RelayReporter(relay, dsn, instance)
    return report_publisher(
        reporter, settings, prefix=prefix, instance=instance, interval_s=interval_s
    )


def _serve(relay: OutboxRelay, dsn: str, metrics_port: int | None, report: LivePublisher) -> None:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if metrics_port is not None:
        serve_metrics(relay, dsn, metrics_port)
    report.start()
    try:
        relay.run(stop)
    finally:
        report.stop()  # a tombstone: the dashboard drops this relay at once


def _check_database(dsn: str) -> None:
    """A wrong DSN, or a database without the outbox tables (none, or from before
    job_outbox_dead), fails here in one line."""
    checks = (
        ("SELECT 1 FROM job_outbox_relay", "has no job_outbox table; create it: producer "
         "outbox init with the same database (or apply producer/outbox/schema.sql)"),
        ("SELECT 1 FROM job_outbox_dead LIMIT 0", "has no job_outbox_dead table (an outbox "
         "from an older release); add it: producer outbox init with the same database "
         "(safe to run again)"),
    )  # fmt: skip
    for query, missing in checks:
        try:
            with psycopg.connect(dsn, connect_timeout=10) as conn:
                conn.execute(query.encode())
        except psycopg.errors.UndefinedTable:
            raise click.ClickException(
                f"{database_of(dsn)} (from {dsn_source()}) {missing}"
            ) from None
        except psycopg.Error as exc:
            raise click.ClickException(_db_problem(dsn, exc)) from None


def _db_problem(dsn: str, exc: psycopg.Error) -> str:
    """One line naming the database (never its password), the reason and the fix."""
    try:
        where = database_of(dsn)
    except psycopg.Error:
        return f"{dsn_source()} is not a valid PostgreSQL connection string: {exc}"
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"cannot use PostgreSQL at {where} (from {dsn_source()}): {reason}; check the DSN, "
        "that the server runs, and the user's rights"
    )
