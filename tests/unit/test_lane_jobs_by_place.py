"""The owner of a line blocked behind its head keeps each held job's place, not its
payload (issue 36 item 7): the job is in the ordering lane, and is read back from
there, by its lane offset, when it goes home to its class topic.

On the old code every lane entry of an owned line kept the whole job: 10,000 held
jobs of 10 KB were 100 MB in the owner, however long the head stayed blocked."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import Producer
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import Pending, SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.copy_sender import CopySender, OutboxConfig
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.ordering.keys import KeyBook
from leasekeeper.ordering.lane import LaneUnavailable, decode_entry, encode_entry
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId
from schemas.job import Job
from schemas.job_headers import JobHead
from tests.unit.test_lane_feed_memory import Message, feed_on, key
from tests.unit.test_outbox import CODEC, Clock, FakeProducer

TP = TopicPart("jobs.q.ready", 0)
LINE = LineId(topic=TP.topic, partition=TP.partition, tenant="t", key="k")
TOPICS = QueueTopics(queue="q")


def _job(seq: int, payload: int = 0) -> Job:
    return Job(
        job_id=f"j{seq}",
        queue="q",
        tenant_id="t",
        type="noop",
        payload=b"x" * payload,
        created_at_ms=0,
        max_attempts=5,
        ordering_key="k",
    )


def test_an_owned_line_keeps_the_places_of_its_jobs_in_the_lane_not_their_payloads() -> None:
    loaded = [
        LaneEntry(
            line=LINE,
            seq=seq,
            job=replace(_job(seq, 10_000), ordering_seq=seq),
            state=LaneState.RETRYING if seq == 0 else LaneState.HELD,
            due_ms=10**15 if seq == 0 else 0,
        )
        for seq in range(10_000)
    ]
    book = KeyBook(keep_jobs=False)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        book.assign(TP, 0, loaded)
        del loaded  # what the lane's reader handed over is gone; the book's copy stays
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 5 * 1024 * 1024, f"{grown} bytes kept for 10,000 held jobs of 10 KB"
    (blocked,) = book.blocked()
    assert (blocked.job_id, blocked.held) == ("j0", 9_999)
    back = book.returns(10**16, lambda _tp: 0)  # the head due: it and those behind go home
    assert [e.seq for e in back] == list(range(32))
    assert {e.job for e in back} == {None} and back[1].job_id == "j1"


def test_a_held_job_keeps_its_payload_until_its_lane_record_is_durable() -> None:
    book = KeyBook(keep_jobs=False)
    head = Pending(TP, 0, 1, JobHead.of(_job(0)), b"")
    book.offer(head, 0)
    (released,) = book.release(lambda _tp: 1)
    assert released is head
    failing = book.failed(head, replace(_job(0), attempt=1), 10_000, "retrying: boom")
    behind = Pending(TP, 1, 1, JobHead.of(_job(1, 100)), b"")
    _verdict, entry = book.offer(behind, 0)
    assert entry is not None and entry.job is not None  # its lane copy is still being written
    book.sent(failing)
    book.sent(entry)
    back = book.returns(10_000, lambda _tp: 2)
    assert [(e.seq, e.job, e.job_id) for e in back] == [(0, None, "j0"), (1, None, "j1")]


def test_a_job_is_read_back_from_the_lane_by_its_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [
        LaneEntry(
            line=LINE, seq=seq, job=replace(_job(seq, 50), ordering_seq=seq), state=LaneState.HELD
        )
        for seq in range(5)
    ]
    messages = [Message(i, key(0, e.seq), encode_entry(e, CODEC)) for i, e in enumerate(entries)]
    feed, _ = feed_on(messages, monkeypatch)
    fetcher = feed_on(messages, monkeypatch)[1]
    feed._fetcher = fetcher  # type: ignore[assignment]
    with pytest.raises(LaneUnavailable, match="not read"):
        feed.job_of(entries[0].without_job())  # not indexed yet: its record not read here
    feed.catch_up()
    jobs = [feed.job_of(e.without_job()) for e in entries[1:]]
    assert [j.job_id for j in jobs] == ["j1", "j2", "j3", "j4"]
    assert jobs[0].payload == b"x" * 50 and jobs[0].ordering_seq == 1
    assert fetcher.assigned == [1]  # read on in lane order: one seek, not one per job


def test_a_record_compacted_away_is_not_taken_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = LaneEntry(line=LINE, seq=7, job=replace(_job(7), ordering_seq=7), state=LaneState.HELD)
    other = replace(old, seq=8, job=replace(_job(8), ordering_seq=8))
    feed, _ = feed_on([Message(0, key(0, 7), encode_entry(old, CODEC))], monkeypatch)
    feed.catch_up()
    # The record at offset 0 is gone; the lane now has another job's record there.
    fetcher = feed_on([Message(0, key(0, 8), encode_entry(other, CODEC))], monkeypatch)[1]
    feed._fetcher = fetcher  # type: ignore[assignment]
    with pytest.raises(LaneUnavailable, match="moved"):
        feed.job_of(old.without_job())


def test_a_held_ordered_job_goes_home_once_its_job_is_read_back_from_the_lane(
    tmp_path: Path,
) -> None:
    """The engine, outbox and router together: the head fails and retries from the lane,
    the job behind it is held; once their lane copies are durable the leasekeeper keeps
    their places only, and their copies home wait (backing off) until the lane gives
    their jobs back, then carry them whole."""
    clock = Clock()
    engine = LeaseEngine(
        store=LeaseStore(tmp_path),
        clock=clock,
        monotonic=clock,
        config=EngineConfig(lease_s=10, lane_jobs_here=False),
    )
    engine.partitions.assign(TP, 0)
    lane: dict[bytes, bytes] = {}
    answering = False

    def lane_job(entry: LaneEntry) -> Job:
        if not answering:
            raise LaneUnavailable("not read back yet")
        job = decode_entry(lane[entry.record_key.encode()], CODEC)[0].job
        assert job is not None
        return job

    producer = FakeProducer()
    router = KafkaRouter(
        codec=CODEC, topics=TOPICS, tiers=DelayTiers(), clock=clock, lane_job=lane_job
    )
    outbox = CopySender(
        producer=cast(Producer, producer),
        copies=engine.copies,
        router=router,
        config=OutboxConfig(backoff_base_s=0.1, backoff_max_s=1.0),
        clock=clock,
    )

    def deliver() -> None:
        """Every record sent so far is durable (the lane's kept by key)."""
        outbox.pump()
        for sent in list(producer.sent):
            if sent.topic == TOPICS.ordering:
                key_of = decode_entry(sent.value, CODEC)[0].record_key.encode()
                lane[key_of] = sent.value
            sent.report(None, None)
        producer.sent.clear()

    engine.fetch.offer(TP, 0, _job(0, 1_000), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.fetch.offer(TP, 1, _job(1, 1_000), b"x")
    engine.workers.settle(
        [
            Settlement(
                lease_id=grant.lease_id,
                token=grant.token,
                outcome=SettleKind.NACK,
                retry_after_s=1.0,
            )
        ]
    )
    deliver()  # the head's retry goes to the lane
    engine.fetch.promote_due()
    deliver()  # the job behind it is held there
    assert set(lane) == {b"jobs.q.ready|0|0", b"jobs.q.ready|0|1"}
    assert (
        engine.commits.commit_positions()[TP][0] == 2
    )  # both resolved: their jobs are in the lane

    clock.now += 2.0  # the head is due: both go home, but the lane does not answer yet
    engine.fetch.promote_due()
    outbox.pump()
    assert producer.sent == [] and outbox.view().counters["lane_waits"] == 2
    answering = True
    clock.now += 1.0
    outbox.pump()
    home = [CODEC.decode(s.value) for s in producer.sent if s.topic == TP.topic]
    assert [(j.job_id, j.ordering_seq, len(j.payload)) for j in home] == [
        ("j0", 0, 1_000),
        ("j1", 1, 1_000),
    ]
