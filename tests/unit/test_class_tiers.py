"""Each priority class has delay tiers of its own (issue 10, item 3): topic names, the
tier a producer's delayed job and each leasekeeper copy (retry, hop, park) picks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.priority import PriorityClasses
from jobcore.topics import QueueTopics
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.core.window import ReadyWindow
from leasekeeper.dashboard.kafka_view import _own_topics
from leasekeeper.fairness.weighted import ready_policy
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.views.inspect_view import _is_tier
from producer.request import JobRequest, build_job, destination
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.job_headers import JobHead

CLASSES = PriorityClasses().names
TIERS = DelayTiers.parse("1s,10s,1m")
TOPICS = QueueTopics(queue="emails", prefix="acme")
CODEC = EnvelopeCodec(SchemaRegistry())
NOW = 1_700_000_000.0


def test_the_default_class_keeps_the_names_existing_queues_use() -> None:
    assert TOPICS.retry("10s") == "acme.emails.retry.10s"
    assert TOPICS.retry("10s", "default") == "acme.emails.retry.10s"
    assert TOPICS.retry("10s", "critical") == "acme.emails.critical.retry.10s"
    assert TIERS.topics(TOPICS) == tuple(f"acme.emails.retry.{t}" for t in ("1s", "10s", "1m"))


def test_every_class_has_every_tier_under_the_prefix_default_first() -> None:
    topics = TIERS.topics(TOPICS, ("critical", "default", "bulk"))
    assert topics == (
        "acme.emails.retry.1s", "acme.emails.retry.10s", "acme.emails.retry.1m",
        "acme.emails.critical.retry.1s", "acme.emails.critical.retry.10s",
        "acme.emails.critical.retry.1m",
        "acme.emails.bulk.retry.1s", "acme.emails.bulk.retry.10s", "acme.emails.bulk.retry.1m",
    )  # fmt: skip
    assert all(TOPICS.is_tier(t) for t in topics)
    assert not any(TOPICS.is_tier(t) for t in (*TOPICS.classes(CLASSES), TOPICS.dlq))


@pytest.mark.parametrize("name", ["emails.critical", "emails.bulk", "emails.retry"])
def test_no_queue_name_can_share_a_class_tier_topic(name: str) -> None:
    """``jobs.emails.critical.retry.1s`` is a class tier of ``emails``; the queue names
    that could produce it are refused (reserved suffixes)."""
    with pytest.raises(ValueError, match="reserved"):
        QueueTopics(queue=name)


def request(**overrides: Any) -> JobRequest:
    fields: dict[str, Any] = {"queue": "emails", "type": "send_receipt", "tenant_id": "acme",
                              "payload": {"order_id": 1, "email": "a@example.com",
                                          "amount_cents": 250}}  # fmt: skip
    return JobRequest(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("priority", "topic"),
    [(None, "acme.emails.retry.10s"), ("default", "acme.emails.retry.10s"),
     ("critical", "acme.emails.critical.retry.10s"), ("bulk", "acme.emails.bulk.retry.10s")],
)  # fmt: skip
def test_a_delayed_enqueue_waits_in_its_class_tier(priority: str | None, topic: str) -> None:
    job = build_job(request(priority=priority, delay=30), codec=CODEC, now=NOW, job_id="x")
    assert destination(job, TOPICS, TIERS) == topic


def job(klass: str) -> Job:
    return Job(job_id="j", queue="emails", tenant_id="acme", type="report", payload=b"",
               created_at_ms=0, priority_class=klass)  # fmt: skip


def copy(kind: CopyKind, klass: str, **fields: Any) -> CopyRequest:
    return CopyRequest(kind=kind, source=TopicPart("acme.emails", 0), offset=0, generation=1,
                       job=job(klass), **fields)  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "fields"),
    [(CopyKind.RETRY, {"delay_s": 12}), (CopyKind.PARK, {"delay_s": 12}),
     (CopyKind.HOP, {"tier": "10s"})],
)  # fmt: skip
@pytest.mark.parametrize("klass", CLASSES)
def test_every_leasekeeper_copy_goes_to_its_class_tier(
    kind: CopyKind, fields: dict[str, Any], klass: str
) -> None:
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=TIERS, classes=CLASSES)
    record = router.record(copy(kind, klass, **fields))
    assert record.topic == TOPICS.retry("10s", klass)
    assert record.key == b"acme"


def test_a_class_the_leasekeeper_does_not_know_waits_in_the_default_tiers() -> None:
    """It has no tier topics here and is dispatched in the default class anyway."""
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=TIERS, classes=CLASSES)
    assert router.record(copy(CopyKind.RETRY, "urgent", delay_s=1)).topic == TOPICS.retry("1s")
    default_only = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=TIERS)
    assert default_only.record(copy(CopyKind.RETRY, "critical", delay_s=1)).topic == (
        TOPICS.retry("1s")
    )


def test_the_gate_consumes_and_holds_every_class_tier() -> None:
    gate = TierGate(TIERS, TOPICS, clock_ms=lambda: 0, classes=CLASSES)
    assert set(gate.topics) == set(TIERS.topics(TOPICS, CLASSES))
    assert gate.tier_of("acme.emails.critical.retry.1m") == "1m"
    assert gate.tier_of("acme.emails.bulk.retry.1s") == "1s"
    assert gate.tier_of("acme.emails.critical") is None
    held = TopicPart("acme.emails.bulk.retry.10s", 2)
    gate.hold(held, 5)
    assert gate.held() == {held}, "a bulk tier's hold is its own, not the critical tier's"


def test_a_hop_from_an_old_shared_tier_moves_into_its_class_tiers() -> None:
    """Records a queue's shared tiers held before an upgrade come back into their
    class; a hop takes them to their class's own tier."""
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=TIERS, classes=CLASSES)
    hop = replace(
        copy(CopyKind.HOP, "critical", tier="1m"), source=TopicPart(TOPICS.retry("1m"), 0)
    )
    assert router.record(hop).topic == "acme.emails.critical.retry.1m"


def test_inspect_and_the_dashboard_see_class_tiers_as_tiers() -> None:
    assert _is_tier("acme.emails.critical.retry.1m", "emails")
    assert _is_tier("acme.emails.retry.1m", "emails")
    assert not _is_tier("acme.emails.critical", "emails")
    counts = {name: 1 for name in (*TIERS.topics(TOPICS, CLASSES), TOPICS.ready, TOPICS.dlq,
                                   TOPICS.of_class("critical"), TOPICS.control)}  # fmt: skip
    own = _own_topics(TOPICS, counts)
    assert set(own) == {*TIERS.topics(TOPICS, CLASSES), TOPICS.ready, TOPICS.dlq}


def test_a_class_s_tiers_of_one_partition_share_one_share_of_a_full_window() -> None:
    """Counting each tier partition on its own would cut every share by the number of
    tiers and classes: with 3 classes of 3 tiers, 2 partitions of each ready topic and
    a window of 48, a partition's share would be 48 // 24 = 2, not 48 // 12 = 4."""
    gate = TierGate(TIERS, TOPICS, clock_ms=lambda: 0, classes=CLASSES)
    ready = [TopicPart(t, p) for t in TOPICS.classes(CLASSES) for p in range(2)]
    tiers = [TopicPart(t, p) for t in TIERS.topics(TOPICS, CLASSES) for p in range(2)]
    window = ReadyWindow(
        records=48, max_bytes=1 << 20, wake=lambda job_type: None, policy=ready_policy()
    )
    flood = ready[0]
    for i in range(48):
        window.push(pending(flood, i))
    assert window.over_share([*ready, *tiers])[1] == 2, "every partition on its own"
    over, headroom = window.over_share([*ready, *tiers], gate.share_unit)
    assert (over, headroom) == ({flood}, 4)
    bulk_1s, bulk_1m = (
        TopicPart(TOPICS.retry("1s", "bulk"), 1),
        TopicPart(TOPICS.retry("1m", "bulk"), 1),
    )
    for i in range(4):
        window.push(pending(bulk_1s, i))
    over, headroom = window.over_share([*ready, *tiers], gate.share_unit)
    assert {bulk_1s, bulk_1m} <= over, "the bulk tiers of partition 1 are over together"
    assert not over & {
        TopicPart(TOPICS.retry("1s", "critical"), 1),
        TopicPart(TOPICS.retry("1s"), 1),
    }
    assert headroom == 4


def pending(tp: TopicPart, i: int) -> Pending:
    head = JobHead.of(replace(job("bulk"), job_id=f"{tp}-{i}"))
    return Pending(tp=tp, offset=i, generation=1, job=head, envelope=b"x")
