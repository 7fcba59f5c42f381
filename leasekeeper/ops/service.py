"""Wires one leasekeeper together: store, engine, Kafka loop and RPC server."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import grpc

from jobcore.kafka import (
    Consumer,
    ErrorKind,
    KafkaError,
    KafkaException,
    KafkaSetupError,
    TopicPartition,
    classify,
    cluster_id,
    make_admin,
    make_consumer,
    make_producer,
    topic_ids,
)
from jobcore.kafka_retry import Stopped, until_done
from jobcore.priority import PriorityClasses
from jobcore.schema_registry import open_registry
from jobcore.topic_admin import CONTROL_RETENTION_MS, ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.breaker.feed import BreakerFeed
from leasekeeper.core.control_state import ControlState
from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.retry_budget import RetryBudget
from leasekeeper.core.state_identity import StateIdentity, StateMismatch, check_identity
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.deferral.reader import flood_reader
from leasekeeper.engine import LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop
from leasekeeper.kafka.control_feed import ControlFeed
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.family_consumer import (
    FamilyConsumer,
    family_instance_id,
    member_settings,
    topic_families,
)
from leasekeeper.kafka.feeds import Feed
from leasekeeper.kafka.kafka_probe import KafkaProbe
from leasekeeper.kafka.result_sender import ResultSender
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.kafka.status_sender import StatusSender
from leasekeeper.ops.dlq_watch import DlqWatch
from leasekeeper.ops.serve_config import ServeConfig as ServeConfig  # where callers look for it
from leasekeeper.ordering.lane import LaneFeed
from leasekeeper.overflow.status_switch import announce_status_switch
from leasekeeper.overflow.switch_hold import CommitReader
from leasekeeper.rpc.server import RpcCounters, start_rpc_server
from leasekeeper.views.fleet import FleetPublisher, PublishConfig, default_instance
from leasekeeper.views.metrics import serve_metrics
from leasekeeper.views.snapshots import LeaseKeeperSnapshot
from schemas.codec import EnvelopeCodec, SchemaRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ServiceFailure:
    """Why the service stopped on its own; ``exit_code`` 2 for setup mistakes."""

    message: str
    exit_code: int


class LeaseKeeperService:
    """Start with ``start()``; ``stop()`` stops fetching, commits and leaves the group."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.topics = QueueTopics(queue=config.queue, prefix=config.prefix)
        self._stop = threading.Event()
        self._store = LeaseStore(config.state_dir)
        codec = EnvelopeCodec(self._schemas())
        self._producer = make_producer(config.kafka)
        classes = tuple(config.engine.class_weights)
        # A held ordered job's payload lives in the lane only; the router reads it back
        # from there (on the loop's thread) when the job goes home.
        router = KafkaRouter(codec=codec, topics=self.topics, tiers=config.tiers, classes=classes,
                             lane_job=lambda entry: self._lane.job_of(entry))  # fmt: skip
        self.engine = LeaseEngine(
            store=self._store,
            config=replace(config.engine, lane_jobs_here=False, queue=config.queue),
            budget=RetryBudget(
                share=config.retry_budget_share, min_retries=config.retry_budget_floor
            ),
            control=ControlState(
                dedupe_window_ms=int(config.dedupe_window_s * 1000),
                cancel_retention_ms=CONTROL_RETENTION_MS,
            ),
            # Jobs are read from their headers; the envelope only when a copy rewrites it.
            decode=codec.decode,
        )
        self.engine.overflow.set_topic(self.topics.overflow)
        self._group_id = config.group_id or self.topics.consumer_group
        self.outbox = CopySender(
            producer=self._producer,
            copies=self.engine.copies,
            router=router,
            status=self._status_sender if config.engine.status_records else None,
            results=self._result_sender,
        )
        control = self.engine.control
        self._feed = ControlFeed(settings=config.kafka, topics=self.topics, state=control)
        self._breaker_feed = BreakerFeed(settings=config.kafka, topics=self.topics,
                                         breakers=self.engine.breakers,
                                         producer=self._producer)  # fmt: skip
        self._lane = LaneFeed(settings=config.kafka, topic=self.topics.ordering, codec=codec,
                              on_operator=self.engine.ordering.lane_operator)  # fmt: skip
        self.failure: ServiceFailure | None = None
        self.connected = threading.Event()
        self.kafka_probe = KafkaProbe(config.kafka, self.topics.ready)
        self.gate = TierGate(config.tiers, self.topics, classes=classes)
        overrides = member_settings(config.session_timeout_ms)
        # Answers to the loop's asynchronous commits, served on the loop's thread.
        overrides["on_commit"] = self._on_commit
        ready_topics = self.topics.classes(classes)
        family_of = topic_families(self.topics, classes, self.gate.topics)

        def family_consumer(family: str) -> Consumer:
            """One family's member of the queue's group (see ``family_consumer``)."""
            member = dict(overrides)
            if config.instance_id:
                member["group.instance.id"] = family_instance_id(config.instance_id, family)
            return make_consumer(config.kafka, self._group_id, **member)

        def new_consumer() -> FamilyConsumer:
            return FamilyConsumer(make=family_consumer, family_of=family_of,
                                  first=self.engine.workers.run_first_classes)  # fmt: skip

        self.loop = ConsumerLoop(
            consumer=new_consumer(),
            producer=self._producer,
            engine=self.engine,
            codec=codec,
            outbox=self.outbox,
            topics=self.topics,
            gate=self.gate,
            ready_topics=(*ready_topics, self.topics.overflow),
            config=config.loop,
            watch=config.kafka.watch,
            consumer_factory=new_consumer,
            # A member of the group that never joins it: it only reads commits.
            commits=CommitReader(lambda: make_consumer(config.kafka, self._group_id)),
            feeds=(self._feed, self._breaker_feed),
            lane=self._lane,
            deferred_reader=lambda: flood_reader(config.kafka, self._group_id),
        )
        self._thread = threading.Thread(target=self._run, name="kafka-loop", daemon=True)
        self._server: grpc.Server | None = None
        self._rpc_counters = RpcCounters()
        self._started = time.time()
        self._publisher: FleetPublisher | None = None
        self._dlq: DlqWatch | None = None

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self.loop.on_commit(error, partitions)

    def _schemas(self) -> SchemaRegistry:
        """The file registry, or registry mode with the envelope's and dead letter's ids
        resolved now: from the disk cache, else from the registry, waited for with
        backoff while it is down (a stop ends the wait)."""
        settings = self.config.schema_registry
        if settings is None:
            return SchemaRegistry(extra_dirs=self.config.schema_dirs)
        return open_registry(
            settings,
            self.config.schema_dirs,
            prefix=self.config.prefix,
            queues=[self.config.queue],
            stop=self._stop,
            payloads=False,
        )

    def start(self) -> None:
        """Answer ``inspect`` and ``/metrics`` at once, then connect to Kafka in the
        background: a cluster that is down at start-up is waited for, not fatal."""
        self._server = start_rpc_server(
            engine=self.engine,
            snapshot=self.snapshot_dict,
            listen=self.config.listen,
            counters=self._rpc_counters,
            security=self.config.security,
        )
        if self.config.metrics_port:
            serve_metrics(self.snapshot_dict, self.config.queue, self.config.metrics_port,
                          self.config.ready_targets)  # fmt: skip
        self.kafka_probe.start()
        self._thread.start()

    def _connect(self) -> None:
        """Tier topics exist and the control feed is read to its end (cancellations and
        dedupe keys are known before the first job), retrying while Kafka is unreachable."""
        watch = self.config.kafka.watch
        until_done(
            self._ensure_tier_topics, what="checking the queue topics", stop=self._stop, watch=watch
        )
        # Before any partition's state is loaded: is the state dir this queue's?
        until_done(
            self._check_state_identity,
            what="checking the state dir's cluster and topics",
            stop=self._stop,
            watch=watch,
        )
        feeds: tuple[Feed, ...] = (self._feed, self._breaker_feed, self._lane)
        for feed in feeds:
            until_done(feed.catch_up, what=f"reading {feed.what}", stop=self._stop, watch=watch)
        self.connected.set()
        self._start_publisher()
        self._start_dlq_watch()
        log.info("connected to Kafka at %s", self.config.kafka.bootstrap)

    def _start_dlq_watch(self) -> None:
        """DLQ depth and newest age for the metrics, asked of Kafka in the background."""
        if not self.config.metrics_port:
            return
        view = KafkaView(self.config.kafka, self.config.prefix)
        self._dlq = DlqWatch(lambda: view.dead_letters(self.config.queue))
        self._dlq.start()

    def _start_publisher(self) -> None:
        """Publish snapshots for the dashboard once connected (the topic exists by then)."""
        if self.config.publish_interval_s <= 0:
            return
        publish = PublishConfig(
            kafka=self.config.kafka,
            prefix=self.config.prefix,
            instance=f"{self.config.queue}@{self.config.instance_id or default_instance()}",
            interval_s=self.config.publish_interval_s,
        )
        self._publisher = FleetPublisher(publish, self.snapshot_dict)
        self._publisher.start()

    def _ensure_tier_topics(self) -> None:
        """The delay tiers this leasekeeper consumes exist, partitioned like the queue."""
        admin = make_admin(self.config.kafka)
        # Serve error_cb of the clients that connected so far: a wrong password is
        # reported there, and the retry loop then stops with it instead of waiting.
        self._producer.poll(0)
        try:
            topics = admin.list_topics(self.topics.ready, timeout=10).topics
        finally:
            admin.poll(0)
        ready = topics.get(self.topics.ready)
        missing = ready is None or (
            ready.error is not None and ready.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        )
        if missing:
            raise KafkaSetupError(
                f"queue topic {self.topics.ready} does not exist: run `producer create-queue "
                f"{self.config.queue} --partitions N` first"
            )
        assert ready is not None
        if ready.error is not None or not ready.partitions:
            # e.g. no leader elected yet (retried), or no access to it (exit 2)
            raise KafkaException(ready.error or KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
        consumed = (
            *self.topics.classes(tuple(self.config.engine.class_weights)),
            self.topics.overflow,
            *self.gate.topics,
        )
        self.engine.limits.queue_partitions(frozenset(consumed), len(ready.partitions))
        ensure_queue_topics(
            self.config.kafka,
            self.config.queue,
            partitions=len(ready.partitions),
            prefix=self.config.prefix,
            tiers=self.config.tiers,
            classes=PriorityClasses(weights=self.config.engine.class_weights),
            status_retention_ms=self.config.status_retention_ms,
        )
        instance = self.config.instance_id or default_instance()
        announce_status_switch(self._producer, self.topics.status,
                               on=self.config.engine.status_records, instance=instance)  # fmt: skip

    def _status_sender(self, on_dropped: Callable[[str], None]) -> StatusSender:
        return StatusSender(self.config.kafka, self.topics.status, on_dropped=on_dropped)

    def _result_sender(self, on_dropped: Callable[[CopyRequest, str], None]) -> ResultSender:
        delivered = self.engine.copies.delivered_many
        return ResultSender(self.config.kafka, self.topics.results, delivered=delivered,
                            on_dropped=on_dropped)  # fmt: skip

    def _check_state_identity(self) -> None:
        """Before any partition's state is loaded: is the state dir this queue's? (The
        default class's topics identify it, as before classes had tiers of their own,
        so the state dir of an existing queue still matches.)"""
        consumed = [self.topics.ready, *self.config.tiers.topics(self.topics)]
        found = StateIdentity(
            cluster_id=cluster_id(self.config.kafka),
            group_id=self._group_id,
            topic_ids=topic_ids(self.config.kafka, consumed),
        )
        outcome = check_identity(
            self._store, found, state_dir=self.config.state_dir, reset=self.config.reset_state
        )
        log.info("state dir %s: identity %s", self.config.state_dir, outcome.value)

    def _run(self) -> None:
        """Connect, then run the loop; whatever ends it early is kept in ``failure``
        so ``serve`` exits non-zero and a supervisor restarts it."""
        try:
            self._connect()
            self.loop.run(self._stop)
        except Stopped:
            pass
        except Exception as exc:
            self.failure = _failure(exc)
            if self.failure.exit_code == 2:  # a setup mistake: serve says it, once
                log.debug("%s", self.failure.message)
            elif isinstance(exc, KafkaException):  # Kafka's words say it all (e.g. fenced)
                log.error("%s", self.failure.message)
            else:
                log.exception("the Kafka loop failed; stopping the leasekeeper")
        finally:
            self._stop.set()

    def snapshot(self) -> LeaseKeeperSnapshot:
        return LeaseKeeperSnapshot(
            engine=self.engine.views.snapshot(),
            queue=self.config.queue,
            topics={
                **{k: getattr(self.topics, k) for k in ("ready", "dlq", "overflow")},
                **{
                    f"class {name}": self.topics.of_class(name)
                    for name in self.config.engine.class_weights
                    if self.topics.of_class(name) != self.topics.ready
                },
            },
            member=self.config.member_id,
            uptime_s=round(time.time() - self._started, 1),
            commits=self.loop.commits,
            held_tiers=self.gate.snapshot(),
            outbox=self.outbox.view(),
            kafka=self.kafka_probe.state(self.connected.is_set()),
            kafka_last_error=self.config.kafka.watch.last_reason(),
            invalid_retry_after=self._rpc_counters.invalid_retry_after,
            control=self._feed.snapshot() if self._feed is not None else None,
            fairness=self.engine.views.fairness(),
            limits=self.engine.limits.snapshot(),
            floods=tuple(self.engine.deferral.views()),
            dead_letters=self._dlq.view() if self._dlq is not None else None,
            breakers=tuple(self.engine.breakers.views()),
            blocked_keys=tuple(self.engine.ordering.blocked_keys()),
            switch_holds=self.loop.switches.held,
        )

    def snapshot_dict(self) -> dict[str, object]:
        """The snapshot at the edge (the RPC's JSON, the metrics collector)."""
        return self.snapshot().to_dict()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the service stopped (or its loop failed)."""
        return self._stop.wait(timeout)

    def stop(self, grace_s: float = 5.0) -> None:
        self._stop.set()
        self.kafka_probe.stop()
        if self._publisher is not None:
            self._publisher.stop()
        if self._dlq is not None:
            self._dlq.stop()
        self.engine.close()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._server is not None:
            self._server.stop(grace_s).wait()
        if not self._thread.is_alive():
            self.loop.close_if_idle()
        self._store.close()
        self._feed.close()
        self._breaker_feed.close()
        self._lane.close()


def _failure(exc: Exception) -> ServiceFailure:
    if isinstance(exc, StateMismatch) or classify(exc) is ErrorKind.SETUP:
        return ServiceFailure(message=str(exc), exit_code=2)
    where = "".join(f" ({note})" for note in getattr(exc, "__notes__", ()))  # the loop's task
    return ServiceFailure(message=f"the Kafka loop failed: {exc}{where}", exit_code=1)
