"""The breakers on the command line: ``serve``'s ``--breaker`` flags and
``leasekeeper breaker open|close TYPE`` for operators.

An operator's command writes the same record a leasekeeper publishes to the
queue's compacted ``jobs.Q.breakers`` topic; every leasekeeper of the queue
adopts it within about a second, and it outlives restarts. ``open`` holds the
breaker open (no probes) until ``close``.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from jobcore.cli_env import environment, topic_prefix_option
from jobcore.cli_kafka import (
    bootstrap_option,
    connect_timeout_option,
    kafka_config_option,
    kafka_settings,
    require_kafka,
)
from jobcore.kafka import ProduceFailure, make_producer, produce_once
from jobcore.topics import QueueTopics
from leasekeeper.breaker.feed import operator_record
from leasekeeper.breaker.settings import DEFAULT_RULE, BreakerRule, BreakerSettings

__all__ = ["breaker", "breaker_settings"]

OFF = "off"
ON = "on"  # the default rule, 50%/20/30s


def breaker_settings(
    *,
    rules: tuple[str, ...],
    default: str,
    cooldown_s: float,
    cooldown_max_s: float,
    probes: int,
) -> BreakerSettings:
    """From ``--breaker TYPE=RULE`` (repeatable), ``--breaker-default RULE|off`` and the
    cool-down and probe flags; ``click.BadParameter`` naming the flag otherwise."""
    by_type: dict[str, BreakerRule] = {}
    for pair in rules:
        job_type, sep, text = pair.partition("=")
        if not job_type.strip() or (sep and not text.strip()):
            raise click.BadParameter(
                f"expected TYPE or TYPE=RATE%/MIN_CALLS/WINDOW (e.g. send_receipt=50%/20/30s), "
                f"got {pair!r}",
                param_hint="--breaker",
            )
        by_type[job_type.strip()] = _rule(text, "--breaker") if sep else DEFAULT_RULE
    chosen = default.strip().lower()
    rule = (
        None
        if chosen == OFF
        else DEFAULT_RULE
        if chosen == ON
        else _rule(default, "--breaker-default")
    )
    try:
        return BreakerSettings(default=rule, by_type=by_type, cooldown_s=cooldown_s,
                               cooldown_max_s=cooldown_max_s, probes=probes)  # fmt: skip
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--breaker-cooldown") from None


def _rule(text: str, flag: str) -> BreakerRule:
    try:
        return BreakerRule.parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=flag) from None


@click.group()
def breaker() -> None:
    """Open or close a job type's circuit breaker on every leasekeeper of a queue."""


def _write(
    queue: str,
    job_type: str,
    *,
    open_: bool,
    reason: str,
    bootstrap: str | None,
    kafka_config: Path | None,
    connect_timeout_s: float,
) -> None:
    env = environment()
    try:
        topics = QueueTopics(queue=queue, prefix=env.topic_prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--queue") from None
    if not job_type.strip():
        raise click.BadParameter("the job type must not be empty", param_hint="TYPE")
    settings = kafka_settings(
        "leasekeeper-breaker", bootstrap=bootstrap, kafka_config=kafka_config, env=env
    )
    require_kafka(settings, connect_timeout_s)
    record = operator_record(job_type, open_=open_, reason=reason,
                             at_ms=time.time_ns() // 1_000_000)  # fmt: skip
    producer = make_producer(settings)
    failures: list[str] = []

    def delivered(failure: ProduceFailure | None, text: str) -> None:
        if failure is not None:
            failures.append(text)

    produce_once(producer, topics.breakers, key=record.key, value=record.encode(),
                 on_delivery=delivered)  # fmt: skip
    left = producer.flush(connect_timeout_s)
    if failures or left:
        why = failures[0] if failures else f"not acknowledged within {connect_timeout_s:g}s"
        raise click.ClickException(
            f"breaker of {job_type} not recorded on {topics.breakers}: {why} (run `producer "
            f"create-queue {queue} --partitions N` if the topic is missing)"
        )
    state = "held open" if open_ else "closed"
    click.echo(f"breaker of job type {job_type} on queue {queue}: {state} ({reason})")


def _operator_command(name: str, *, open_: bool, doc: str) -> click.Command:
    """``breaker open`` and ``breaker close``: the same flags, one record each."""

    @click.command(name, help=doc)
    @click.argument("job_type", metavar="TYPE")
    @click.option("--queue", required=True, help="the queue (jobs.QUEUE)")
    @click.option("--reason", required=True, help="why, shown by inspect and in the logs")
    @bootstrap_option
    @kafka_config_option
    @topic_prefix_option
    @connect_timeout_option
    def command(
        job_type: str,
        queue: str,
        reason: str,
        bootstrap: str | None,
        kafka_config: Path | None,
        connect_timeout_s: float,
    ) -> None:
        _write(queue, job_type, open_=open_, reason=reason, bootstrap=bootstrap,
               kafka_config=kafka_config, connect_timeout_s=connect_timeout_s)  # fmt: skip

    return command


open_breaker = _operator_command(
    "open",
    open_=True,
    doc="Hold TYPE's breaker open on every leasekeeper of QUEUE: its jobs are parked "
    "(no attempt spent), no probes are sent, until `breaker close`.",
)
close_breaker = _operator_command(
    "close",
    open_=False,
    doc="Close TYPE's breaker on every leasekeeper of QUEUE: its jobs run again at once, "
    "with a fresh window.",
)


breaker.add_command(open_breaker)
breaker.add_command(close_breaker)
