"""``leasekeeper ordering list|replay|skip``: the operator's side of per-key ordering.

With ``serve --on-dead block``, an ordering key whose head is dead-lettered stays
blocked: its dead head keeps a record in the ordering lane (``jobs.Q.ordering``)
and the jobs behind it wait there. ``replay`` rewrites that record as due now
with its attempts reset (the job runs again in its place, before the jobs behind
it); ``skip`` deletes it (the key goes on with the next job; the dead letter
stays in the DLQ). Both write to the lane as ``writer: operator``; the leasekeeper
owning the key's partition applies the record within a loop turn, and it outlives
restarts like every lane record. ``list`` shows what the lane holds per key.
"""

from __future__ import annotations

import time
from dataclasses import replace
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
from jobcore.kafka import KafkaSettings, ProduceFailure, make_producer, produce_once
from jobcore.terminal_text import printable
from jobcore.topics import QueueTopics
from leasekeeper.ordering.lane import OPERATOR, LaneFeed, encode_entry
from leasekeeper.ordering.values import LaneEntry, LaneState
from schemas.codec import EnvelopeCodec, SchemaRegistry

__all__ = ["ordering"]


@click.group()
def ordering() -> None:
    """Per-key ordering: list blocked keys, replay or skip a dead head that blocks one."""


def _lane(queue: str, settings: KafkaSettings, topics: QueueTopics) -> list[LaneEntry]:
    feed = LaneFeed(settings=settings, topic=topics.ordering, codec=_codec(),
                    on_operator=lambda *_: None)  # fmt: skip
    try:
        feed.catch_up()
        loaded = {} if feed.missing else feed.load(set(feed.offsets), timeout_s=60.0)
    finally:
        feed.close()
    if feed.missing:
        raise click.ClickException(
            f"queue {queue!r} has no ordering lane {topics.ordering}: run `producer "
            f"create-queue {queue} --partitions N` to add it"
        )
    entries = [entry for part in loaded.values() for entry in part]
    return sorted(entries, key=lambda e: (e.line.tenant, e.line.key, e.seq))


def _codec() -> EnvelopeCodec:
    return EnvelopeCodec(SchemaRegistry())


def _connect(queue: str, bootstrap: str | None, kafka_config: Path | None,
             connect_timeout_s: float) -> tuple[KafkaSettings, QueueTopics]:  # fmt: skip
    env = environment()
    try:
        topics = QueueTopics(queue=queue, prefix=env.topic_prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--queue") from None
    settings = kafka_settings("leasekeeper-ordering", bootstrap=bootstrap,
                              kafka_config=kafka_config, env=env)  # fmt: skip
    require_kafka(settings, connect_timeout_s)
    return settings, topics


@ordering.command("list")
@click.option("--queue", required=True, help="the queue (jobs.QUEUE)")
@bootstrap_option
@kafka_config_option
@topic_prefix_option
@connect_timeout_option
def list_lane(
    queue: str, bootstrap: str | None, kafka_config: Path | None, connect_timeout_s: float
) -> None:
    """Per ordering key with jobs in the lane: its head (retrying, held or dead) and
    how many jobs wait behind it."""
    settings, topics = _connect(queue, bootstrap, kafka_config, connect_timeout_s)
    heads: dict[tuple[str, str], list[LaneEntry]] = {}
    for entry in _lane(queue, settings, topics):
        heads.setdefault((entry.line.tenant, entry.line.key), []).append(entry)
    if not heads:
        click.echo(f"no ordering key of queue {queue} has jobs out of its partition")
    for (tenant, key), entries in heads.items():
        head = entries[0]
        # Keys, tenants, ids and reasons are the producer's and handlers' text.
        line = (f"{key} (tenant {tenant}): head job {head.job_id} {head.state.value}, "
                f"{len(entries) - 1} behind it; {head.reason}")  # fmt: skip
        click.echo(printable(line))


def _operator_command(name: str, *, replay: bool, doc: str) -> click.Command:
    @click.command(name, help=doc)
    @click.option("--queue", required=True, help="the queue (jobs.QUEUE)")
    @click.option("--tenant", required=True, help="the key's tenant")
    @click.option("--key", "key", required=True, help="the ordering key")
    @bootstrap_option
    @kafka_config_option
    @topic_prefix_option
    @connect_timeout_option
    def command(
        queue: str,
        tenant: str,
        key: str,
        bootstrap: str | None,
        kafka_config: Path | None,
        connect_timeout_s: float,
    ) -> None:
        settings, topics = _connect(queue, bootstrap, kafka_config, connect_timeout_s)
        entries = _lane(queue, settings, topics)
        dead = [e for e in entries if (e.line.tenant, e.line.key) == (tenant, key)
                and e.state is LaneState.DEAD]  # fmt: skip
        if not dead:
            raise click.ClickException(
                f"ordering key {key!r} of tenant {tenant!r} on queue {queue} has no dead job "
                f"blocking it (see `leasekeeper ordering list --queue {queue}`)"
            )
        _write(settings, topics, dead[0], replay=replay, timeout_s=connect_timeout_s)
        what = "runs again" if replay else "is skipped; the key goes on"
        job_id = dead[0].job_id
        click.echo(printable(f"ordering key {key} (tenant {tenant}): dead job {job_id} {what}"))

    return command


def _write(
    settings: KafkaSettings, topics: QueueTopics, entry: LaneEntry, *, replay: bool,
    timeout_s: float,
) -> None:  # fmt: skip
    producer = make_producer(settings)
    failures: list[str] = []

    def delivered(failure: ProduceFailure | None, text: str) -> None:
        if failure is not None:
            failures.append(text)

    value = None
    if replay:
        assert entry.job is not None  # read from the lane record, job and all
        again = replace(entry, state=LaneState.RETRYING, due_ms=time.time_ns() // 1_000_000,
                        reason="replayed by an operator",
                        job=replace(entry.job, attempt=0, run_at_ms=0))  # fmt: skip
        value = encode_entry(again, _codec(), writer=OPERATOR)
    produce_once(producer, topics.ordering, key=entry.record_key.encode(), value=value,
                 headers=[("writer", OPERATOR.encode())], on_delivery=delivered)  # fmt: skip
    left = producer.flush(timeout_s)
    if failures or left:
        why = failures[0] if failures else f"not acknowledged within {timeout_s:g}s"
        raise click.ClickException(f"not recorded on {topics.ordering}: {why}")


ordering.add_command(
    _operator_command(
        "replay",
        replay=True,
        doc="Run the dead job that blocks KEY again, in its place (attempts reset).",
    )
)
ordering.add_command(
    _operator_command(
        "skip",
        replay=False,
        doc="Let KEY go on without the dead job that blocks it (it stays in the DLQ).",
    )
)
