"""Reading past a flood (``leasekeeper/deferral``), over the in-memory Kafka: the real
consumer loop, engine and outbox, one partition, a flood written undiverted (as the
outbox relay, another language or a restarted producer writes one)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaSettings, make_consumer, make_producer
from jobcore.plain import plain
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.core.leases import Grant, SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.dashboard.pages import flood_section
from leasekeeper.deferral.lines import flood_lines
from leasekeeper.deferral.metrics import flood_families
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.fetcher import BEHIND_FETCHES
from leasekeeper.kafka.router import KafkaRouter
from memkafka import Cluster, installed
from producer.api import JobProducer
from producer.flood import FloodPolicy
from schemas.codec import EnvelopeCodec, SchemaRegistry

SETTINGS = KafkaSettings(bootstrap="memory")
TOPICS = QueueTopics(queue="q")
TIERS = DelayTiers()
CODEC = EnvelopeCodec(SchemaRegistry())
WINDOW = 40
# More than a loop step's fetches can read past (``READ_PAST_ROUNDS`` of 50 records).
FLOOD = 1_500
OTHERS = 12


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with installed(Cluster()) as memory:
        ensure_queue_topics(SETTINGS, "q", partitions=1, tiers=TIERS)
        yield memory


def _engine(tmp_path: Path, **config: object) -> LeaseEngine:
    config.setdefault("window_records", WINDOW)
    settings = EngineConfig(**config)  # type: ignore[arg-type]
    return LeaseEngine(store=LeaseStore(tmp_path), config=settings, decode=CODEC.decode)


def _loop(engine: LeaseEngine) -> ConsumerLoop:
    producer = make_producer(SETTINGS)
    answers: list[ConsumerLoop] = []
    consumer = make_consumer(SETTINGS, TOPICS.consumer_group,
                             on_commit=lambda err, tps: answers[0].on_commit(err, tps))  # fmt: skip
    router = KafkaRouter(codec=CODEC, topics=TOPICS, tiers=TIERS)
    loop = ConsumerLoop(
        consumer=consumer,
        producer=producer,
        engine=engine,
        codec=CODEC,
        outbox=CopySender(producer=producer, copies=engine.copies, router=router),
        topics=TOPICS,
        gate=TierGate(TIERS, TOPICS),
        config=LoopConfig(commit_interval_s=0.0, poll_timeout_s=0.0, batch_size=50),
        deferred_reader=lambda: make_consumer(SETTINGS, TOPICS.consumer_group),
    )
    answers.append(loop)
    loop._subscribe()
    return loop


def _enqueue_flood_then_others(garbage_at: int = -1) -> tuple[list[str], list[str]]:
    """The flood, then the other tenants; ``garbage_at``: after that many flood jobs, a
    record of the flooding tenant that cannot be decoded."""
    with JobProducer(SETTINGS, flood=FloodPolicy.off()) as producer:
        receipt = {"order_id": 1, "email": "a@example.com", "amount_cents": 100}
        flood = []
        for n in range(FLOOD):
            if n == garbage_at:
                raw = make_producer(SETTINGS)
                raw.produce(TOPICS.ready, key=b"big", value=b"not an envelope", partition=0)
                raw.flush(5)
            flood.append(producer.enqueue("q", "send_receipt", receipt, tenant_id="big"))
        others = [producer.enqueue("q", "noop", {"n": n}, tenant_id=f"o{n}") for n in range(OTHERS)]
    return flood, others


def _ack(engine: LeaseEngine, grants: list[Grant]) -> None:
    engine.workers.settle([Settlement(lease_id=g.lease_id, token=g.token, outcome=SettleKind.ACK)
                           for g in grants])  # fmt: skip


def _run_all(
    loop: ConsumerLoop, engine: LeaseEngine, done: Callable[[list[str]], bool]
) -> list[str]:
    """Step the loop, claiming and acking every job, until ``done`` (the ids run)."""
    ran: list[str] = []
    for _ in range(2_000):
        loop._step()
        grants = engine.workers.claim("w", 25, wait_s=0)
        _ack(engine, grants)
        ran += _ids(grants)
        if done(ran):
            break
    return ran


def _committed(cluster: Cluster) -> int:
    return (cluster.committed(TOPICS.consumer_group, TOPICS.ready, 0) or (-1, ""))[0]


def _ids(grants: list[Grant]) -> list[str]:
    return [g.job.job_id for g in grants if g.job is not None]


def _claim_others(
    loop: ConsumerLoop, engine: LeaseEngine, others: set[str], steps: int
) -> list[str]:
    """Step the loop, claiming only the other tenants' jobs (``noop``): no worker runs
    the flood's type (``send_receipt``) in this part, so it fills the window and stays."""
    seen: list[str] = []
    for _ in range(steps):
        loop._step()
        grants = engine.workers.claim("w", 100, wait_s=0, job_types=frozenset({"noop"}))
        _ack(engine, grants)
        seen += _ids(grants)
        if set(seen) >= others:
            break
    return seen


def test_the_other_tenants_are_read_past_a_flood_and_the_flood_runs_in_order(
    cluster: Cluster, tmp_path: Path
) -> None:
    flood, others = _enqueue_flood_then_others()
    engine = _engine(tmp_path)
    loop = _loop(engine)
    # Nothing of the flood is run, yet every other tenant behind it is leased.
    seen = _claim_others(loop, engine, set(others), steps=200)
    assert set(seen) == set(others)
    (view,) = engine.deferral.views()
    assert view.tenant == "big" and view.waiting > 0 and view.read_past >= OTHERS
    _seen_in_inspect_metrics_and_dashboard(engine)
    # The commit stays at the flood's first unrun job: nothing is lost.
    assert _committed(cluster) in (-1, 0)

    # Then the flood runs, handed back as it drains, in enqueue order.
    ran = _run_all(loop, engine, lambda ran: len(ran) >= FLOOD)
    assert ran == flood  # each once, in order
    assert engine.deferral.views() == []
    for _ in range(20):
        loop._step()
        if _committed(cluster) == FLOOD + OTHERS:
            break
    assert cluster.committed(TOPICS.consumer_group, TOPICS.ready, 0) == (FLOOD + OTHERS, "")
    loop.close_if_idle()


def _seen_in_inspect_metrics_and_dashboard(engine: LeaseEngine) -> None:
    """The flood as ``inspect``, the metrics and the dashboard show it, from the JSON a
    leasekeeper sends."""
    (flood,) = json.loads(json.dumps([plain(v) for v in engine.deferral.views()]))
    snapshot, now_ms = {"floods": [flood]}, flood["since_ms"] + 3_000
    (line,) = flood_lines(snapshot, now_ms)
    assert "reading past a flood[/] of big on jobs.q/0 for 3s" in line
    assert f"{flood['waiting']} of its jobs wait in Kafka" in line
    families = {f.name: f for f in flood_families(snapshot, "q", now_ms)}
    (waiting,) = families["leasekeeper_flood_waiting_jobs"].samples
    assert waiting.labels == {"queue": "q", "topic": "jobs.q", "partition": "0", "tenant": "big"}
    assert waiting.value == flood["waiting"]
    assert families["leasekeeper_flood_age_seconds"].samples[0].value == 3.0
    html = flood_section([{"instance": "lk-1", "snapshot": snapshot}], now_ms)
    assert "Floods read past" in html and "lk-1" in html and "jobs.q/0" in html


def test_an_undecodable_record_inside_a_deferred_flood_is_dead_lettered_and_the_rest_runs(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A record of the flooding tenant held unread, then read again and found to be no
    envelope: to the DLQ with its reason, as one read the first time goes; the reader
    does not stop at it, and every flood job behind it runs in order."""
    flood, others = _enqueue_flood_then_others(garbage_at=FLOOD // 2)
    engine = _engine(tmp_path)
    loop = _loop(engine)
    assert set(_claim_others(loop, engine, set(others), steps=200)) == set(others)
    assert engine.deferral.views()[0].waiting > FLOOD // 2  # the garbage is held too
    ran = _run_all(
        loop, engine, lambda ran: len(ran) >= FLOOD and _committed(cluster) == FLOOD + OTHERS + 1
    )
    assert ran == flood
    (dead,) = cluster.records(TOPICS.dlq)
    assert dead.key == b"big"
    assert _committed(cluster) == FLOOD + OTHERS + 1
    loop.close_if_idle()


def test_without_the_deferral_the_others_wait_behind_the_flood(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The case the deferral exists for: switched off, a full window pauses the flooded
    partition, and the other tenants behind the flood are never read."""
    _, others = _enqueue_flood_then_others()
    engine = _engine(tmp_path, defer_floods=False)
    loop = _loop(engine)
    assert _claim_others(loop, engine, set(others), steps=200) == []
    loop.close_if_idle()


def test_a_partition_read_past_a_flood_goes_beyond_the_plain_span_while_described(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``max_span`` caps how far past its commit a partition is read; past a deferred
    flood it reads on while the commit metadata still describes every job resolved
    beyond the commit (a run of deferred offsets compresses to a few bytes)."""
    _, others = _enqueue_flood_then_others()
    engine = _engine(tmp_path, max_span=100)
    loop = _loop(engine)
    assert set(_claim_others(loop, engine, set(others), steps=300)) == set(others)
    # The acks beyond the commit travel in its metadata, for the partition's next owner.
    for _ in range(5):
        loop._step()
    offset, metadata = cluster.committed(TOPICS.consumer_group, TOPICS.ready, 0) or (-1, "")
    assert offset == 0 and (metadata or "").startswith("lq1:")
    loop.close_if_idle()


def test_a_record_held_after_its_deferral_ended_inside_the_fetch_is_deferred_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The fetch asks which keys are held, then a rebalance inside a later fetch of the
    same step assigns the partition again (its deferral is dropped): a record it holds
    unread by that key is tracked, so the tenant is deferred again from it, never lost
    or left to stop the leasekeeper."""
    _, others = _enqueue_flood_then_others()
    engine = _engine(tmp_path)
    loop = _loop(engine)
    assert set(_claim_others(loop, engine, set(others), steps=200)) == set(others)
    (tp,) = {TopicPart(v.topic, v.partition) for v in engine.deferral.views()}
    assert engine.fetch.holding() == {tp: b"big"}
    engine.deferral._deferral.assigned(tp, None)  # what the rebalance does
    next_offset = FLOOD + OTHERS  # past the end: a record not fetched yet
    engine.fetch.offer_many([(tp, next_offset, None, b"big")])
    (view,) = engine.deferral.views()
    assert (view.tenant, view.waiting) == ("big", 1)
    loop.close_if_idle()


def _steps_until_others_run(
    loop: ConsumerLoop, engine: LeaseEngine, others: set[str], flood: list[str]
) -> tuple[int, list[str]]:
    """Step the loop with workers that run every job at once (the window never fills:
    the leasekeeper's reading is the slowest part); returns the steps the other tenants
    took to run, and the order the flood ran in (stepping on until it all ran)."""
    ran: list[str] = []
    steps = 0
    for step in range(1, 1_000):
        loop._step()
        grants = engine.workers.claim("w", 1_000, wait_s=0)
        _ack(engine, grants)
        ran += _ids(grants)
        if not steps and set(ran) >= others:
            steps = step
        if steps and len(ran) >= len(flood) + len(others):
            break
    return steps, [job for job in ran if job not in others]


@pytest.mark.parametrize("defer", [True, False])
def test_a_flood_the_leasekeeper_reads_slower_than_it_arrives_is_read_past_too(
    cluster: Cluster, tmp_path: Path, defer: bool
) -> None:
    """The second trigger: no full window (the workers keep up), but every fetch is full
    and one tenant fills it, so the others of its partition wait behind its backlog in
    Kafka. Deferred after ``BEHIND_FETCHES`` full fetches, they are read past: within a
    few steps, where reading the flood takes FLOOD / 50 = 30. The flood runs in order."""
    flood, others = _enqueue_flood_then_others()
    engine = _engine(tmp_path, window_records=100_000, defer_floods=defer)
    loop = _loop(engine)
    steps, flood_ran = _steps_until_others_run(loop, engine, set(others), flood)
    assert flood_ran == flood  # each once, in order
    if defer:
        assert 0 < steps <= BEHIND_FETCHES + 3, steps
        assert engine.deferral.views() == []  # handed back in full, then ended
    else:
        assert steps >= FLOOD // 50, steps
    loop.close_if_idle()
