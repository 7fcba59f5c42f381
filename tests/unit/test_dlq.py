"""The DLQ toolset without a broker: decoding, filters, replayed jobs, and the replay's
commits over the in-memory Kafka (``memkafka``)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

import pytest
from click.testing import CliRunner

from jobcore.kafka import Consumer, KafkaError, KafkaSettings, Producer, TopicPartition
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.dlq import (
    DeadLetterFilter,
    DlqEntry,
    Replayer,
    ReplayOptions,
    ReplayReport,
    decode_entry,
    default_group,
    replay_job,
)
from leasekeeper.dlq.cli import dlq
from leasekeeper.dlq.entries import format_ms, parse_time_ms
from memkafka import Cluster, MemoryConsumer, MemoryMessage, installed
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import AttemptError, DeadLetter, Job

CODEC = EnvelopeCodec(SchemaRegistry())
TOPICS = QueueTopics(queue="q")
SETTINGS = KafkaSettings(bootstrap="memory")
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def job(
    job_id: str, *, tenant: str = "acme", type: str = "noop", classes: tuple[str, ...] = ("E",)
) -> Job:
    errors = tuple(
        AttemptError(attempt=n, at_ms=T0, worker="w", error_class=c, message="m", traceback="")
        for n, c in enumerate(classes, start=1)
    )
    return Job(
        job_id=job_id,
        queue="q",
        tenant_id=tenant,
        type=type,
        payload=b"",
        attempt=len(errors),
        created_at_ms=T0,
        errors=errors,
        replay_count=2,
    )


def letter(job: Job | None, *, reason: str = "attempts exhausted", died_at_ms: int = T0) -> bytes:
    return CODEC.encode_dead_letter(
        DeadLetter(
            envelope=CODEC.encode(job) if job is not None else None,
            raw_value=None if job is not None else b"\x01",
            reason=reason if job is not None else "undecodable",
            detail="d",
            source_topic="jobs.q",
            source_partition=0,
            source_offset=0,
            died_at_ms=died_at_ms,
        )
    )


def entry(value: bytes, offset: int = 0) -> DlqEntry:
    return decode_entry(CODEC, 0, offset, value)


# -- decoding and filtering ---------------------------------------------------------


def test_decode_entry_keeps_going_on_bad_bytes() -> None:
    good = entry(letter(job("a")))
    assert good.job is not None and good.job.job_id == "a" and good.problem is None
    raw = entry(letter(None))
    assert raw.job is None and raw.letter is not None
    assert raw.problem == "undecodable: d"
    corrupt = entry(b"\x00junk")
    assert corrupt.letter is None and corrupt.problem is not None
    assert corrupt.problem.startswith("corrupt:")
    unreadable = CODEC.encode_dead_letter(
        DeadLetter(
            envelope=b"\xc3\x01garbage!",
            reason="permanent error",
            detail="d",
            source_topic="jobs.q",
            source_partition=0,
            source_offset=0,
            died_at_ms=T0,
        )
    )
    assert (entry(unreadable).problem or "").startswith("envelope undecodable:")


def test_filter_criteria() -> None:
    a = entry(letter(job("a", tenant="acme", type="noop", classes=("Timeout", "Declined"))))
    b = entry(letter(job("b", tenant="globex"), reason="permanent error", died_at_ms=T0 + 1000))
    raw = entry(letter(None))
    corrupt = entry(b"junk")

    def selected(selection: DeadLetterFilter) -> set[str | None]:
        found = [e for e in (a, b, raw, corrupt) if selection.matches(e)]
        return {e.job.job_id if e.job else e.problem for e in found}

    assert len(selected(DeadLetterFilter())) == 4
    assert selected(DeadLetterFilter(tenant="globex")) == {"b"}
    assert selected(DeadLetterFilter(type="noop", tenant="acme")) == {"a"}
    assert selected(DeadLetterFilter(error_class="Declined")) == {"a"}
    assert selected(DeadLetterFilter(error_class="Timeout")) == set()  # only the last attempt
    assert selected(DeadLetterFilter(job_id="b")) == {"b"}
    assert selected(DeadLetterFilter(reason="undecodable")) == {"undecodable: d"}
    assert selected(DeadLetterFilter(since_ms=T0 + 1000)) == {"b"}  # inclusive
    assert selected(DeadLetterFilter(until_ms=T0 + 1000)) == {"a", "undecodable: d"}  # exclusive


def test_filter_fingerprint_is_stable_and_tells_selections_apart() -> None:
    assert DeadLetterFilter(tenant="a").fingerprint() == DeadLetterFilter(tenant="a").fingerprint()
    assert DeadLetterFilter(tenant="a").fingerprint() != DeadLetterFilter(type="a").fingerprint()
    assert default_group(TOPICS, DeadLetterFilter()) == "dlq-replay.jobs.q"
    named = default_group(TOPICS, DeadLetterFilter(tenant="a"))
    assert named == f"dlq-replay.jobs.q.{DeadLetterFilter(tenant='a').fingerprint()}"


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-01-01T00:00:00Z", T0),
        ("2026-01-01T01:00:00+01:00", T0),
        ("2026-01-01T00:00:00", T0),  # no zone: UTC
        ("2026-01-01", T0),
        ("2026-01-01T00:00:01.5Z", T0 + 1500),
    ],
)
def test_times_parse_as_iso_8601(text: str, ms: int) -> None:
    assert parse_time_ms(text) == ms


def test_bad_times_are_refused_and_times_print_as_utc() -> None:
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_time_ms("yesterday")
    assert format_ms(T0 + 61_000) == "2026-01-01T00:01:01Z"


def test_a_replayed_job_keeps_its_id_and_history_with_attempts_reset() -> None:
    dead = job("a", classes=("X", "Y"))
    again = replay_job(dead, now_ms=T0 + 5)
    assert again.job_id == "a"
    assert again.attempt == 0
    assert again.replay_count == dead.replay_count + 1
    assert again.errors == dead.errors
    assert again.run_at_ms == T0 + 5


def test_a_replayed_ordered_job_joins_the_end_of_its_line_in_its_own_class() -> None:
    """Its old ``ordering_seq`` would put it ahead of its key's later jobs, or make it
    a duplicate of the key's dead head; the default class's topic would put it in a
    second line of its key."""
    dead = replace(job("a"), ordering_key="user-42", ordering_seq=7, priority_class="critical")
    cluster, _, replayer = replay([letter(dead)])
    (again,) = replayed(cluster)
    assert again.ordering_seq == -1 and again.ordering_key == "user-42"
    assert again.priority_class == "critical"
    assert len(cluster.records("jobs.q.critical")) == 1 and replayer.report.replayed == 1


# -- the replay's commits, over memkafka -------------------------------------------


class CommitLog(MemoryConsumer):
    """memkafka's consumer, keeping every offset committed: the cluster keeps only a
    group's last commit, and these tests check the whole sequence."""

    def __init__(self, cluster: Cluster, group: str) -> None:
        super().__init__(cluster, {"group.id": group})
        self.commits: list[int] = []

    def commit(
        self,
        message: MemoryMessage | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        answer = super().commit(message, offsets, asynchronous)
        self.commits += [tp.offset for tp in offsets or []]
        return answer


class Ticks:
    """A clock that moves 0.1 s each time it is read: commits come due without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.1
        return self.now


def replay(
    values: list[bytes],
    *,
    selection: DeadLetterFilter | None = None,
    refuse_nth: int | None = None,
    dry_run: bool = False,
    committed_at: int | None = None,
) -> tuple[Cluster, list[int], Replayer]:
    """Replay ``values``, the DLQ's records from offset 0, from the group's commit at
    ``committed_at``; the ``refuse_nth`` record scanned (from 0) is replayed but its
    delivery times out. Returns the cluster, the offsets committed, the replayer."""
    cluster = Cluster()
    with installed(cluster):
        ensure_queue_topics(SETTINGS, "q", partitions=1)
    for value in values:
        cluster.append(TOPICS.dlq, 0, b"k", value, None)
    selection = selection or DeadLetterFilter()
    group = default_group(TOPICS, selection)
    if committed_at is not None:
        cluster.commit(group, {(TOPICS.dlq, 0): (committed_at, None)})
    consumer = CommitLog(cluster, group)

    def refuse(report: ReplayReport) -> None:  # heard before each record is handled
        if report.scanned == refuse_nth:
            cluster.fail_produces(TOPICS.ready, KafkaError._MSG_TIMED_OUT)

    options = ReplayOptions(
        topics=TOPICS,
        selection=selection,
        group=group,
        dry_run=dry_run,
        flush_timeout_s=1.0,
    )
    replayer = Replayer(
        consumer=cast(Consumer, consumer),
        producer=None if dry_run else cast(Producer, cluster.producer({})),
        codec=CODEC,
        options=options,
        on_progress=refuse,
        clock=Ticks(),
        wall=lambda: T0 / 1000,
    )
    replayer.run()
    return cluster, consumer.commits, replayer


def replayed(cluster: Cluster) -> list[Job]:
    """The jobs the replay wrote, each checked to be on its priority class's topic."""
    found = []
    for topic in sorted(set(cluster.topics) - {TOPICS.dlq}):
        for record in cluster.records(topic):
            again = CODEC.decode(record.value or b"")
            assert topic == TOPICS.of_class(again.priority_class)
            found.append(again)
    return found


def test_replay_commits_to_the_end_once_every_job_is_acknowledged() -> None:
    values = [letter(job(f"j{n}")) for n in range(5)]
    cluster, commits, replayer = replay(values)
    jobs = replayed(cluster)
    assert [j.job_id for j in jobs] == [f"j{n}" for n in range(5)]
    assert all(j.attempt == 0 and j.replay_count == 3 and j.run_at_ms == T0 for j in jobs)
    assert commits[-1] == 5
    assert commits == sorted(commits)
    assert replayer.report.replayed == 5 and replayer.report.ok


def test_the_commit_stops_at_a_job_kafka_did_not_acknowledge() -> None:
    values = [letter(job(f"j{n}")) for n in range(5)]
    _, commits, replayer = replay(values, refuse_nth=1)
    assert max(commits) == 1  # j0 is done; j1 must be replayed again
    assert replayer.report.replayed == 4
    assert not replayer.report.ok
    assert "jobs.q.dlq/0/1" in replayer.report.failed[0]


def test_replay_resumes_from_the_committed_offset() -> None:
    values = [letter(job(f"j{n}")) for n in range(5)]
    cluster, commits, _ = replay(values, committed_at=3)
    assert [j.job_id for j in replayed(cluster)] == ["j3", "j4"]
    assert commits[-1] == 5


def test_unselected_and_undecodable_records_are_committed_past_not_replayed() -> None:
    values = [
        letter(job("a", tenant="acme")),
        letter(None),
        letter(job("b", tenant="globex")),
        b"junk",
        letter(job("c", tenant="acme")),
    ]
    cluster, commits, replayer = replay(values, selection=DeadLetterFilter(tenant="acme"))
    assert [j.job_id for j in replayed(cluster)] == ["a", "c"]
    assert replayer.report.not_matching == 1
    assert [e.offset for e in replayer.report.undecodable] == [1, 3]
    assert commits[-1] == 5


def test_a_dry_run_selects_but_neither_produces_nor_commits() -> None:
    values = [letter(job(f"j{n}")) for n in range(3)]
    cluster, commits, replayer = replay(values, dry_run=True)
    assert [e.job.job_id for e in replayer.report.selected if e.job] == ["j0", "j1", "j2"]
    assert replayed(cluster) == []  # nothing produced, so nothing delivered either
    assert commits == []


def test_cli_refuses_a_bad_time_before_touching_kafka() -> None:
    result = CliRunner().invoke(
        dlq, ["list", "--queue", "q", "--since", "yesterday", "--bootstrap", "127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert "not an ISO 8601 time" in result.output
