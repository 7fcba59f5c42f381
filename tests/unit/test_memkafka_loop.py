"""The leasekeeper's real consumer loop, engine and outbox over the in-memory Kafka.

Jobs are enqueued by the real ``JobProducer``; a worker claims them through the
engine's claim/settle API, acks three and nacks one. The acks are committed with
the engine's commit positions (offset and metadata), and the nack's retry copy lands
in the retry tier's topic: what a broker would hold, with no broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaSettings, make_consumer, make_producer
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import Grant, SettleKind, Settlement
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.router import KafkaRouter
from memkafka import Cluster, installed
from producer.api import JobProducer
from schemas.codec import EnvelopeCodec, SchemaRegistry

SETTINGS = KafkaSettings(bootstrap="memory")
TOPICS = QueueTopics(queue="q")
TIERS = DelayTiers()
PARTITIONS = 2
CODEC = EnvelopeCodec(SchemaRegistry())


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as memory:
        ensure_queue_topics(SETTINGS, "q", partitions=PARTITIONS, tiers=TIERS)
        yield memory


def _loop(engine: LeaseEngine) -> ConsumerLoop:
    """Built as ``LeaseKeeperService`` builds it, from the factories of jobcore.kafka."""
    producer = make_producer(SETTINGS)
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=TIERS)
    answers: list[ConsumerLoop] = []
    consumer = make_consumer(SETTINGS, TOPICS.consumer_group,
                             on_commit=lambda err, tps: answers[0].on_commit(err, tps))  # fmt: skip
    loop = ConsumerLoop(
        consumer=consumer,
        producer=producer,
        engine=engine,
        codec=CODEC,
        outbox=CopySender(producer=producer, copies=engine.copies, router=router),
        topics=TOPICS,
        gate=TierGate(TIERS, TOPICS),
        config=LoopConfig(commit_interval_s=0.0, poll_timeout_s=0.0),
    )
    answers.append(loop)
    loop._subscribe()
    return loop


def _claim(loop: ConsumerLoop, engine: LeaseEngine, count: int) -> list[Grant]:
    grants: list[Grant] = []
    for _ in range(50):
        loop._step()
        grants += engine.workers.claim("w", count - len(grants), wait_s=0)
        if len(grants) >= count:
            break
    return grants


def _committed(cluster: Cluster, partition: int) -> int:
    found = cluster.committed(TOPICS.consumer_group, TOPICS.ready, partition)
    return -1 if found is None else found[0]


def test_acks_are_committed_and_a_nack_is_copied_to_its_retry_tier(
    cluster: Cluster, tmp_path: Path
) -> None:
    with JobProducer(SETTINGS) as producer:
        ids = [producer.enqueue("q", "noop", {"n": n}, tenant_id=f"t{n}") for n in (2, 3, 4, 5)]
    ends = {p: len(cluster.records(TOPICS.ready, p)) for p in range(PARTITIONS)}
    assert ends == {0: 2, 1: 2}  # tenants t2, t3 and t4, t5 share a partition
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(), decode=CODEC.decode)
    loop = _loop(engine)
    grants = _claim(loop, engine, 4)
    assert sorted(g.job.job_id for g in grants if g.job is not None) == sorted(ids)
    nacked, acked = grants[0], grants[1:]
    engine.workers.settle([Settlement(lease_id=g.lease_id, token=g.token, outcome=SettleKind.ACK)
                   for g in acked])  # fmt: skip
    for _ in range(5):
        loop._step()
    _, held, at = nacked.lease_id.rsplit("/", 2)  # the lease names its record
    # The commit stops at the job still leased; its metadata carries the acks beyond it.
    offset, metadata = cluster.committed(TOPICS.consumer_group, TOPICS.ready, int(held)) or (-1, "")
    assert offset == int(at) and metadata
    other = 1 - int(held)
    assert cluster.committed(TOPICS.consumer_group, TOPICS.ready, other) == (ends[other], "")
    nack = Settlement(lease_id=nacked.lease_id, token=nacked.token, outcome=SettleKind.NACK,
                      error_class="Boom", retry_after_s=1)  # fmt: skip
    engine.workers.settle([nack])
    for _ in range(50):
        loop._step()
        if all(_committed(cluster, p) == end for p, end in ends.items()):
            break
    for p, end in ends.items():  # every job resolved: nothing left to describe
        assert cluster.committed(TOPICS.consumer_group, TOPICS.ready, p) == (end, "")
    retried = [r for t in TIERS.names for r in cluster.records(TOPICS.retry(t))]
    assert len(retried) == 1
    assert nacked.job is not None
    retry = CODEC.decode(retried[0].value or b"")
    assert retry.job_id == nacked.job.job_id
    assert retried[0].key == nacked.job.tenant_id.encode()  # the tenant keeps its partition
    loop.close_if_idle()
