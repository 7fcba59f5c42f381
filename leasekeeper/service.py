"""Wires one leasekeeper together: store, engine, Kafka loop and RPC server."""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from jobcore.kafka import KafkaSettings, make_consumer, make_producer
from jobcore.topics import QueueTopics
from leasekeeper.consumer_loop import ConsumerLoop, LoopConfig
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.metrics import serve_metrics
from leasekeeper.router import KafkaRouter
from leasekeeper.rpc import start_rpc_server
from leasekeeper.store import LeaseStore
from schemas.codec import EnvelopeCodec, SchemaRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ServeConfig:
    queue: str
    kafka: KafkaSettings
    state_dir: Path
    listen: str
    prefix: str = "jobs"
    token: str | None = None
    group_id: str | None = None
    engine: EngineConfig = field(default_factory=EngineConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    schema_dirs: tuple[str, ...] = ()
    member_id: str = field(default_factory=socket.gethostname)
    # Static group membership: a leasekeeper restarted with the same instance id
    # gets its partitions back at once instead of after the session timeout.
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    metrics_port: int | None = None


class LeaseKeeperService:
    """Start with ``start()``; ``stop()`` stops fetching, commits and leaves the group."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.topics = QueueTopics(queue=config.queue, prefix=config.prefix)
        self._stop = threading.Event()
        self._store = LeaseStore(config.state_dir)
        codec = EnvelopeCodec(SchemaRegistry(extra_dirs=config.schema_dirs))
        self._producer = make_producer(config.kafka)
        router = KafkaRouter(producer=self._producer, codec=codec, topics=self.topics)
        self.engine = LeaseEngine(store=self._store, router=router, config=config.engine)
        overrides: dict[str, str | int] = {
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": config.session_timeout_ms,
            "heartbeat.interval.ms": max(500, config.session_timeout_ms // 5),
        }
        if config.instance_id:
            overrides["group.instance.id"] = config.instance_id
        consumer = make_consumer(
            config.kafka, config.group_id or self.topics.consumer_group, **overrides
        )
        self.loop = ConsumerLoop(
            consumer=consumer,
            producer=self._producer,
            engine=self.engine,
            codec=codec,
            router=router,
            topics=self.topics,
            config=config.loop,
        )
        self._thread = threading.Thread(target=self._run_loop, name="kafka-loop", daemon=True)
        self._server: grpc.Server | None = None
        self._started = time.time()

    def start(self) -> None:
        self._server = start_rpc_server(
            engine=self.engine,
            snapshot=self.snapshot,
            listen=self.config.listen,
            token=self.config.token,
        )
        self._thread.start()
        if self.config.metrics_port:
            serve_metrics(self.snapshot, self.config.queue, self.config.metrics_port)

    def _run_loop(self) -> None:
        try:
            self.loop.run(self._stop)
        except Exception:
            log.exception("the Kafka loop failed; stopping the leasekeeper")
            self._stop.set()

    def snapshot(self) -> dict[str, object]:
        view = self.engine.snapshot()
        view.update(
            queue=self.config.queue,
            topics={"ready": self.topics.ready, "dlq": self.topics.dlq},
            member=self.config.member_id,
            uptime_s=round(time.time() - self._started, 1),
            commits=self.loop.commits,
        )
        return view

    def wait(self, timeout: float | None = None) -> bool:
        """True once the service stopped (or its loop failed)."""
        return self._stop.wait(timeout)

    def stop(self, grace_s: float = 5.0) -> None:
        self._stop.set()
        self.engine.close()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._server is not None:
            self._server.stop(grace_s).wait()
        self._store.close()
