"""Result records on their own producer: one ``produce()`` each, and one delivery
report per partition per turn, which answers for the group it ends; a transient
failure sends the group again, a refusal drops its results and resolves their jobs;
the offset commits only once the result is durable, and the job's status follows it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaError, KafkaSettings
from jobcore.kafka import Producer as KafkaProducer
from jobcore.results import results_partition
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka import result_sender as sender_module
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.result_sender import RETRY_AFTER_S, ResultSender
from leasekeeper.kafka.router import KafkaRouter
from tests.unit.test_outbox import CODEC, TOPICS, TP, Clock, FakeProducer, job
from tests.unit.test_result_outbox import ack_with_result

Report = Callable[[KafkaError | None, Any], None]


class Message:
    def __init__(self, partition: int, key: bytes) -> None:
        self._partition, self._key = partition, key

    def partition(self) -> int:
        return self._partition

    def key(self) -> bytes:
        return self._key


@dataclass
class Producer:
    """A producer that reports a record's delivery only to the callback it was produced
    with, per partition in order, as librdkafka does."""

    sent: list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]] = field(default_factory=list)
    callbacks: list[Report | None] = field(default_factory=list)  # of each record sent
    full: int = 0  # produce() calls to refuse with BufferError
    room: int | None = None  # produce() calls to take before the queue is full
    reported: dict[int, int] = field(default_factory=dict)  # delivered, per partition
    due: list[tuple[Report, KafkaError | None, Message]] = field(default_factory=list)

    def produce(self, topic: str, value: bytes, key: bytes, *, partition: int,
                headers: list[tuple[str, bytes]], on_delivery: Report | None = None,
                ) -> None:  # fmt: skip
        if self.room == 0:
            self.room, self.full = None, self.full + 1
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        if self.room is not None:
            self.room -= 1
        assert isinstance(headers, list), "the client takes headers as a list or a dict"
        self.sent.append((partition, key, value, headers))
        self.callbacks.append(on_delivery)

    def poll(self, timeout: float) -> int:
        """Reports are served here, as librdkafka serves them: inside a poll."""
        due, self.due = self.due, []
        for report, error, message in due:
            report(error, message)
        return len(due)

    def flush(self, timeout: float) -> int:
        self.poll(timeout)
        return 0

    def deliver(self, partition: int, error: int | None = None) -> None:
        """The report of the partition's oldest unreported record, as librdkafka orders
        them."""
        reported = self.reported.get(partition, 0)
        index = [n for n, (p, *_) in enumerate(self.sent) if p == partition][reported]
        self.reported[partition] = reported + 1
        if (report := self.callbacks[index]) is not None:
            message = Message(partition, self.sent[index][1])
            self.due.append((report, None if error is None else KafkaError(error), message))

    @property
    def reports_asked(self) -> int:
        return sum(c is not None for c in self.callbacks)


def result(job_id: str, offset: int = 0) -> CopyRequest:
    return CopyRequest(kind=CopyKind.RESULT, source=TopicPart("jobs.q", 0), offset=offset,
                       generation=1, raw_key=job_id.encode(), raw_value=b'{"n":1}')  # fmt: skip


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Producer]:
    made: list[Producer] = []

    def make_producer(settings: KafkaSettings, **config: Any) -> Producer:
        assert config["compression.type"] == "none" and "on_delivery" not in config
        assert config["message.timeout.ms"] == 0, "a group's report answers for every record"
        made.append(Producer())
        return made[-1]

    monkeypatch.setattr(sender_module, "make_producer", make_producer)
    return made


def sender(
    clock: Clock, handed: list[int] | None = None
) -> tuple[ResultSender, list[CopyRequest], list[tuple[CopyRequest, str]]]:
    """The sender, what it hands over as delivered and dropped; ``handed``: the size of
    each hand-over."""
    delivered: list[CopyRequest] = []
    dropped: list[tuple[CopyRequest, str]] = []

    def hand(requests: list[CopyRequest]) -> None:
        delivered.extend(requests)
        if handed is not None:
            handed.append(len(requests))

    send = ResultSender(KafkaSettings(bootstrap="x:1"), TOPICS.results, clock=clock,
                        delivered=hand,
                        on_dropped=lambda r, why: dropped.append((r, why)))  # fmt: skip
    return send, delivered, dropped


def test_results_go_to_their_partition_and_resolve_in_each_partition_s_order(
    made: list[Producer],
) -> None:
    handed: list[int] = []
    send, delivered, dropped = sender(Clock(), handed)
    ids = [f"job-{n}" for n in range(40)]
    other = CopyRequest(kind=CopyKind.RETRY, source=TopicPart("jobs.q", 0), offset=99,
                        generation=1)  # fmt: skip
    assert send.take([*map(result, ids), other]) == [other], "the rest is the outbox's"
    (producer,) = made
    assert sorted((p, k) for p, k, _, _ in producer.sent) == sorted(
        (results_partition(i), i.encode()) for i in ids
    )
    partitions = {results_partition(i) for i in ids}
    assert producer.reports_asked == len(partitions), "one report per partition"
    assert all(h == [("content-type", b"application/json")] for *_, h in producer.sent)
    for partition, *_ in producer.sent:  # reports come per partition, in produce order
        producer.deliver(partition)
    assert delivered == [], "reports are served by a poll"
    send.take([])
    assert handed == [40], "one poll's deliveries go to the engine together"
    assert sorted(r.raw_key or b"" for r in delivered) == sorted(i.encode() for i in ids)
    for partition in range(8):
        mine = [r.raw_key for r in delivered if results_partition((r.raw_key or b"").decode())
                == partition]  # fmt: skip
        assert mine == [i.encode() for i in ids if results_partition(i) == partition]
    assert dropped == [] and send.in_flight == 0


def test_a_transient_failure_is_sent_again_after_a_pause_and_a_refusal_is_dropped(
    made: list[Producer],
) -> None:
    clock = Clock()
    send, delivered, dropped = sender(clock)
    first, second = result("a"), result("b")
    send.take([first])
    (producer,) = made
    producer.deliver(results_partition("a"), KafkaError._MSG_TIMED_OUT)
    send.take([])
    assert delivered == [] and dropped == [] and send.in_flight == 1
    assert len(producer.sent) == 1, "not before the pause"
    clock.now += RETRY_AFTER_S
    send.take([second])
    assert [k for _, k, _, _ in producer.sent] == [b"a", b"a", b"b"]
    producer.deliver(results_partition("a"))
    producer.deliver(results_partition("b"), KafkaError.TOPIC_AUTHORIZATION_FAILED)
    send.take([])
    assert delivered == [first]
    ((request, why),) = dropped
    assert request is second and "TOPIC_AUTHORIZATION_FAILED" in why


def test_a_full_local_queue_keeps_the_result_for_later(made: list[Producer]) -> None:
    clock = Clock()
    send, delivered, _ = sender(clock)
    send.take([])
    (producer,) = made
    producer.full = 1
    send.take([result("a")])
    assert producer.sent == [] and send.in_flight == 1
    clock.now += RETRY_AFTER_S
    send.take([])
    producer.deliver(results_partition("a"))
    send.take([])
    assert [r.raw_key for r in delivered] == [b"a"]


def same_partition(count: int) -> list[str]:
    ids = (f"job-{n}" for n in range(1000))
    return [i for i in ids if results_partition(i) == 3][:count]


def test_a_group_s_one_report_answers_for_results_sent_without_one(made: list[Producer]) -> None:
    """The queue fills in the middle of a group: what was sent waits for the next record
    sent to its partition with a report, the result kept for later."""
    clock = Clock()
    send, delivered, dropped = sender(clock)
    send.take([])
    (producer,) = made
    producer.room = 2
    a, b, c, d = map(result, same_partition(4))
    send.take([a, b, c])
    assert [k for _, k, _, _ in producer.sent] == [a.raw_key, b.raw_key]
    assert producer.reports_asked == 0 and send.in_flight == 3
    producer.deliver(3)
    producer.deliver(3)
    send.take([])
    assert delivered == [], "no report: a and b may not be durable yet"
    clock.now += RETRY_AFTER_S
    send.take([d])
    assert [k for _, k, _, _ in producer.sent][2:] == [c.raw_key, d.raw_key]
    assert producer.reports_asked == 1
    producer.deliver(3)
    send.take([])
    assert delivered == []
    producer.deliver(3)
    send.take([])
    assert delivered == [a, b, c, d] and dropped == [] and send.in_flight == 0


def test_a_failed_group_is_sent_again_or_dropped_as_one(made: list[Producer]) -> None:
    clock = Clock()
    send, delivered, dropped = sender(clock)
    first = list(map(result, same_partition(3)))
    send.take(first)
    (producer,) = made
    for _ in first:
        producer.deliver(3, None if _ is not first[-1] else KafkaError._MSG_TIMED_OUT)
    send.take([])
    assert delivered == [] and dropped == [] and send.in_flight == 3
    clock.now += RETRY_AFTER_S
    send.take([])
    assert [k for _, k, _, _ in producer.sent][3:] == [r.raw_key for r in first], "all again"
    for _ in first:
        producer.deliver(3, None if _ is not first[-1] else KafkaError.TOPIC_AUTHORIZATION_FAILED)
    send.take([])
    assert delivered == [] and [r for r, _ in dropped] == first and send.in_flight == 0
    assert all("TOPIC_AUTHORIZATION_FAILED" in why for _, why in dropped)


def test_through_the_outbox_the_offset_commits_only_once_the_result_is_durable(
    tmp_path: Path, made: list[Producer], caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10),
                         clock=clock, monotonic=clock)  # fmt: skip
    engine.partitions.assign(TP, 0)
    copies = FakeProducer()
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=DelayTiers(), clock=clock)

    def results(dropped: Callable[[CopyRequest, str], None]) -> ResultSender:
        return ResultSender(KafkaSettings(bootstrap="x:1"), TOPICS.results, clock=clock,
                            delivered=engine.copies.delivered_many, on_dropped=dropped)  # fmt: skip

    outbox = CopySender(producer=cast(KafkaProducer, copies), copies=engine.copies, router=router,
                    clock=clock, results=results)  # fmt: skip

    def committable() -> int:
        return engine.commits.commit_positions()[TP][0]

    ack_with_result(engine)
    outbox.pump()
    (producer,) = made
    assert copies.sent == [] and len(producer.sent) == 1, "not through the outbox's entries"
    assert committable() == 0
    producer.deliver(producer.sent[0][0])
    assert committable() == 0, "not before the poll serves the report"
    outbox.pump()
    assert committable() == 1
    outbox.pump()
    assert [s.topic for s in copies.sent] == [TOPICS.status], "the status after the result"
    # A refused one resolves its job too, counted and warned about by the outbox.
    engine.fetch.offer(TP, 1, replace(job(), job_id="job-1"), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.settle([Settlement(lease_id=grant.lease_id, token=grant.token,
                                      outcome=SettleKind.ACK,
                              result=b"1")])  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="leasekeeper.kafka.copy_sender"):
        outbox.pump()
        producer.deliver(producer.sent[-1][0], KafkaError.UNKNOWN_TOPIC_OR_PART)
        outbox.pump()  # publishes the outbox's view
    assert committable() == 2 and outbox.view().counters["results_dropped"] == 1
    assert "job results are being dropped" in caplog.text


def test_the_results_one_poll_reports_resolve_under_one_store_write(
    tmp_path: Path, made: list[Producer]
) -> None:
    """A result is a copy per job: resolving each delivery with a store write of its own
    was much of what a result cost. One poll's deliveries are written together."""
    clock = Clock()
    store = LeaseStore(tmp_path)
    engine = LeaseEngine(store=store, config=EngineConfig(lease_s=10), clock=clock,
                         monotonic=clock)  # fmt: skip
    engine.partitions.assign(TP, 0)
    send = ResultSender(KafkaSettings(bootstrap="x:1"), TOPICS.results, clock=clock,
                        delivered=engine.copies.delivered_many,
                        on_dropped=lambda r, why: None)  # fmt: skip
    for offset in range(20):
        engine.fetch.offer(TP, offset, replace(job(), job_id=f"job-{offset}"), b"x")
    grants = engine.workers.claim("w", 20, wait_s=0)
    engine.workers.settle([Settlement(lease_id=g.lease_id, token=g.token, outcome=SettleKind.ACK,
                              result=b"1") for g in grants])  # fmt: skip
    assert send.take(engine.copies.take()) == []
    (producer,) = made
    assert len(producer.sent) == 20 and engine.commits.commit_positions()[TP][0] == 0
    for partition, *_ in producer.sent:
        producer.deliver(partition)
    writes: list[int] = []
    write = store.write
    store.write = lambda batch: (writes.append(len(batch)), write(batch))[1]  # type: ignore[method-assign]
    send.take([])
    assert writes == [20], "one write holds the 20 resolutions"
    assert engine.commits.commit_positions()[TP][0] == 20
