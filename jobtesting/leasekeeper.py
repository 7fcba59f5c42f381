"""One queue's leasekeeper, in-process: the real engine, consumer loop, outbox and
router, tier gate and control feed, wired as ``LeaseKeeperService`` wires them, on the
memory cluster and a fake clock, stepped by the caller instead of a thread of its own.

Workers reach it through the RPC servicer's own ``Claim`` and ``Settle`` (the same
protobuf messages a worker's gRPC channel carries), called directly: no server, no
socket. What it leaves out: the gRPC server, metrics, the dashboard's publisher, the
breakers' shared topic and the ordering lane's feed (ordered jobs keep their lane in
memory, as a unit-test engine does).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import grpc

from jobcore.delay_tiers import DelayTiers
from jobcore.kafka import KafkaError, KafkaSettings, TopicPartition, make_consumer, make_producer
from jobcore.topic_admin import CONTROL_RETENTION_MS
from jobcore.topics import QueueTopics
from jobtesting.clock import FakeClock
from leasekeeper.core.control_state import ControlState
from leasekeeper.core.retry_budget import DEFAULT_MIN_RETRIES, DEFAULT_SHARE, RetryBudget
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.tier_gate import TierGate
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.kafka.control_feed import ControlFeed
from leasekeeper.kafka.copy_sender import CopySender
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.kafka.status_sender import StatusSender
from leasekeeper.rpc.server import LeaseKeeperServicer
from schemas import worker_pb2 as pb
from schemas.codec import EnvelopeCodec
from schemas.lease_answer import LeaseAnswer
from workers import wire
from workers.messages import ClaimedJob, WorkerSettlement

__all__ = ["MemoryLeaseKeeper"]

# The servicer asks the context only for the peer's name, and only when a request
# names no worker: every request here names one.
_NO_CONTEXT = cast(grpc.ServicerContext, None)
DEDUPE_WINDOW_S = 24 * 3600


class MemoryLeaseKeeper:
    def __init__(
        self,
        *,
        queue: str,
        settings: KafkaSettings,
        clock: FakeClock,
        codec: EnvelopeCodec,
        tiers: DelayTiers,
        state_dir: Path,
        worker_id: str,
        seed: int,
    ) -> None:
        self.topics = QueueTopics(queue=queue)
        self._state_dir = state_dir
        self._worker_id = worker_id
        self._store = LeaseStore(state_dir)
        config = EngineConfig(queue=queue)
        classes = tuple(config.class_weights)
        self.engine = LeaseEngine(
            store=self._store,
            config=config,
            budget=RetryBudget(share=DEFAULT_SHARE, min_retries=DEFAULT_MIN_RETRIES),
            control=ControlState(
                dedupe_window_ms=DEDUPE_WINDOW_S * 1000, cancel_retention_ms=CONTROL_RETENTION_MS
            ),
            clock=clock.time,
            monotonic=clock.monotonic,
            decode=codec.decode,
            rng=random.Random(seed),  # the backoff's jitter: the same on every run
        )
        self.engine.overflow.set_topic(self.topics.overflow)
        self.gate = TierGate(tiers, self.topics, clock_ms=clock.time_ms, classes=classes)
        ready = (*self.topics.classes(classes), self.topics.overflow)
        self.engine.limits.queue_partitions(frozenset((*ready, *self.gate.topics)), 1)
        producer = make_producer(settings)
        router = KafkaRouter(codec=codec, topics=self.topics, tiers=tiers, classes=classes)

        def status(on_dropped: Callable[[str], None]) -> StatusSender:
            return StatusSender(settings, self.topics.status, on_dropped=on_dropped,
                                clock=clock.monotonic)  # fmt: skip

        consumer = make_consumer(settings, self.topics.consumer_group, on_commit=self._on_commit)
        self._feed = ControlFeed(settings=settings, topics=self.topics,
                                 state=self.engine.control, clock=clock.time)  # fmt: skip
        self.loop = ConsumerLoop(
            consumer=consumer,
            producer=producer,
            engine=self.engine,
            codec=codec,
            outbox=CopySender(
                producer=producer,
                copies=self.engine.copies,
                router=router,
                clock=clock.monotonic,
                status=status,
            ),
            topics=self.topics,
            gate=self.gate,
            ready_topics=ready,
            config=LoopConfig(commit_interval_s=0.0, poll_timeout_s=0.0),
            clock=clock.monotonic,
            feeds=(self._feed,),
        )
        self._feed.catch_up()
        self._servicer = LeaseKeeperServicer(self.engine, snapshot=dict)
        self.loop._subscribe()

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self.loop.on_commit(error, partitions)

    def step(self) -> None:
        """One turn of the Kafka loop: fetch, offer, send copies, commit."""
        self.loop._step()

    def claim(self, job_types: Sequence[str], max_jobs: int = 1) -> list[ClaimedJob]:
        """What a worker's Claim gets, never waiting (the caller steps the loop)."""
        request = pb.ClaimRequest(max_jobs=max_jobs, wait_ms=0, job_types=list(job_types),
                                  worker_id=self._worker_id, start_now=max_jobs)  # fmt: skip
        answer = self._servicer.Claim(request, _NO_CONTEXT)
        return [wire.lease(job) for job in answer.jobs]

    def settle(self, settlement: WorkerSettlement) -> LeaseAnswer:
        request = pb.SettleRequest(settlements=[wire.settlement(settlement)],
                                   worker_id=self._worker_id)  # fmt: skip
        answer = self._servicer.Settle(request, _NO_CONTEXT)
        return wire.result(answer.results[0])

    def busy(self) -> bool:
        """Leases or copies still in flight: more steps will change something."""
        return self.engine.partitions.in_flight() > 0

    def next_due_ms(self) -> int | None:
        """When the next waiting job is due (epoch ms): the head of a held delay-tier
        partition, or a job in the window's delayed heap; None when nothing waits."""
        found = list(self.gate.holding.values())
        delayed = self.engine.views.snapshot().next_delayed_due_ms
        if delayed is not None:
            found.append(delayed)
        return min(found, default=None)

    def close(self) -> None:
        self.engine.close()
        self.loop.close_if_idle()
        self._feed.close()
        self._store.close()
        shutil.rmtree(self._state_dir, ignore_errors=True)
