"""Run the real processes (leasekeeper, workers) the way a user does, for system tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from devtools.localkafka import KafkaUnavailable, LocalKafka, obtain
from devtools.waiting import wait_until as wait_until
from jobcore.kafka import (
    KafkaSettings,
    Message,
    TopicPartition,
    committed_offsets,
    end_offsets,
    make_admin,
    make_consumer,
)
from jobcore.topics import QueueTopics
from leasekeeper.views.inspect_view import fetch_snapshot
from producer import JobProducer, JobRequest, ensure_queue_topics
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import DeadLetter
from tests.apps.recording import SCHEMAS, Event, count_log, read_events, read_log

BIN = Path(sys.executable).parent


@dataclass(kw_only=True)
class Leasekeeper:
    """One ``leasekeeper serve`` process on a Unix socket."""

    queue: str
    bootstrap: str
    state_dir: Path
    socket: Path
    log: Path
    lease_s: float = 30.0
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"unix:{self.socket}"

    def start(self) -> Leasekeeper:
        cmd = [
            str(BIN / "leasekeeper"),
            "serve",
            "--queue", self.queue,
            "--bootstrap", self.bootstrap,
            "--state-dir", str(self.state_dir),
            "--listen", self.target,
            "--lease", str(self.lease_s),
            *self.extra_args,
        ]  # fmt: skip
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        return self

    def snapshot(self) -> dict[str, Any] | None:
        try:
            return fetch_snapshot(self.target, None, timeout=2)
        except grpc.RpcError:
            return None

    def wait_assigned(self, partitions: int, timeout: float = 60) -> None:
        """Until it owns ``partitions`` partitions, some of each topic family among them:
        each family has a consumer of its own (``leasekeeper.kafka.family_consumer``), and
        they may be assigned one after another."""

        def ready() -> bool:
            self.assert_alive()
            snap = self.snapshot()
            return (
                snap is not None
                and len(snap["partitions"]) >= partitions
                and owns_every_family(snap)
            )

        wait_until(ready, timeout, f"leasekeeper to own {partitions} partitions")

    def assert_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"leasekeeper exited: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def owns_every_family(snapshot: dict[str, Any]) -> bool:
    """A partition of each priority class's ready topic, and one of the delay tiers."""
    topics = snapshot["topics"]
    wanted = {t for name, t in topics.items() if name == "ready" or name.startswith("class ")}
    owned = {p["topic"] for p in snapshot["partitions"]}
    return wanted <= owned and any(".retry." in topic for topic in owned)


@dataclass(kw_only=True)
class WorkerProcess:
    """One ``workers run`` process."""

    app: str
    target: str
    log: Path
    env: dict[str, str]
    concurrency: int = 8
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        cmd = [
            str(BIN / "workers"),
            "run",
            self.app,
            "--target", self.target,
            "--concurrency", str(self.concurrency),
            *self.extra_args,
        ]  # fmt: skip
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
            )
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


APP = "tests.apps.recording:app"
PARTITIONS = 4


class System:
    """A queue, its leasekeepers and worker processes under ``tmp``, the way users run them."""

    def __init__(
        self,
        kafka: KafkaSettings,
        unique: str,
        tmp: Path,
        lease_s: float = 30.0,
        partitions: int = PARTITIONS,
    ) -> None:
        self.kafka = kafka
        self.lease_s = lease_s
        self.partitions = partitions
        # Static group membership (--instance-id): a restart takes the partitions back
        # at once. Without it, a restarted leasekeeper waits out the dead one's session.
        self.static = True
        self.queue = f"q{unique}"
        self.topics = QueueTopics(queue=self.queue)
        self.tmp = tmp
        self.recordings = tmp / "recordings"
        self.recordings.mkdir()
        ensure_queue_topics(kafka, self.queue, partitions=partitions)
        self.leasekeeper = self.new_leasekeeper()
        self.leasekeepers = [self.leasekeeper]
        self.workers: list[WorkerProcess] = []
        self.last_offsets: object = None

    def configure(
        self, *, lease_s: float, extra: list[str] | None = None, static: bool = True
    ) -> None:
        """Change the (not yet started) first leasekeeper's lease and options."""
        assert self.leasekeeper.process is None
        self.lease_s = lease_s
        self.static = static
        self.leasekeeper = self.leasekeepers[0] = self.new_leasekeeper(extra=extra)

    def new_leasekeeper(self, name: str = "lk", extra: list[str] | None = None) -> Leasekeeper:
        """A leasekeeper with its own state dir and socket (``name`` tells them apart)."""
        return Leasekeeper(
            queue=self.queue,
            bootstrap=self.kafka.bootstrap,
            state_dir=self.tmp / f"state-{name}",
            socket=self.tmp / f"{name}.sock",
            log=self.tmp / f"{name}.log",
            lease_s=self.lease_s,
            extra_args=[
                *(["--instance-id", f"{name}-{self.queue}"] if self.static else []),
                *(extra or []),
            ],
        )

    def start(self, workers: int = 2, concurrency: int = 16, **worker_args: Any) -> None:
        """Start the leasekeeper (unless it runs already) and ``workers`` worker processes."""
        if self.leasekeeper.process is None:
            self.leasekeeper.start().wait_assigned(self.partitions)
        for _ in range(workers):
            self.add_worker(self.leasekeeper, concurrency=concurrency, **worker_args)

    def add_worker(
        self, leasekeeper: Leasekeeper, concurrency: int = 16, extra: list[str] | None = None
    ) -> WorkerProcess:
        worker = WorkerProcess(
            app=APP,
            target=leasekeeper.target,
            log=self.tmp / f"worker-{len(self.workers)}.log",
            env={"RECORDING_DIR": str(self.recordings)},
            concurrency=concurrency,
            extra_args=["--schema-path", str(SCHEMAS), *(extra or [])],
        )
        self.workers.append(worker.start())
        return worker

    def restart_leasekeeper(self) -> None:
        """A new process on the same state dir and instance id (a restart in place)."""
        extra = self.leasekeeper.extra_args[2:] if self.static else self.leasekeeper.extra_args
        self.leasekeeper = self.new_leasekeeper(extra=extra)
        self.leasekeepers.append(self.leasekeeper)
        self.leasekeeper.start().wait_assigned(self.partitions)

    def enqueue(self, count: int, tenants: int = 3, **options: Any) -> list[str]:
        """``count`` noop jobs spread over ``tenants`` tenants."""
        return self.enqueue_requests(
            JobRequest(
                queue=self.queue,
                type="noop",
                payload={"n": i},
                tenant_id=f"tenant-{i % tenants}",
                **options,
            )
            for i in range(count)
        )

    def enqueue_tasks(self, count: int, tenant: str = "tenant-0", **task: Any) -> list[str]:
        """``count`` task jobs; ``task`` holds payload fields and job options."""
        return self.enqueue_requests(
            self.task_request(i, tenant=tenant, **task) for i in range(count)
        )

    def task_request(self, n: int, tenant: str = "tenant-0", **task: Any) -> JobRequest:
        options = {k: task.pop(k) for k in ("max_attempts", "timeout_s") if k in task}
        return JobRequest(
            queue=self.queue, type="task", payload={"n": n, **task}, tenant_id=tenant, **options
        )

    def enqueue_requests(self, requests: Iterable[JobRequest]) -> list[str]:
        registry = SchemaRegistry(extra_dirs=[SCHEMAS])
        with JobProducer(self.kafka, registry=registry) as producer:
            return producer.enqueue_batch(requests)

    def refused(self) -> list[Event]:
        return read_log(self.recordings, "refused")

    def ack_events(self) -> list[Event]:
        return read_log(self.recordings, "acks")

    def in_flight(self) -> Counter[int]:
        """Jobs started and not yet acked, per worker process: the acks are counted
        first, so a job that starts and is acked between the two reads is not counted
        as acked without its start (which made the count negative under load)."""
        acked = count_log(self.recordings, "acks")
        running = count_log(self.recordings, "starts")
        running.subtract(acked)
        return running

    def runs(self) -> Counter[str]:
        return Counter(read_events(self.recordings, "runs"))

    def starts(self) -> list[Event]:
        return read_log(self.recordings, "starts")

    def acks(self) -> set[str]:
        return set(read_events(self.recordings, "acks"))

    def committed(self) -> dict[int, int]:
        consumer = make_consumer(self.kafka, self.topics.consumer_group)
        try:
            return committed_offsets(consumer, self.topics.ready, range(self.partitions))
        finally:
            consumer.close()

    def end_offsets(self) -> dict[int, int]:
        consumer = make_consumer(self.kafka, f"probe-{self.queue}")
        try:
            return end_offsets(consumer, self.topics.ready, range(self.partitions))
        finally:
            consumer.close()

    def caught_up(self) -> bool:
        """Committed offsets equal end offsets on every partition."""
        committed, end = self.committed(), self.end_offsets()
        self.last_offsets = (committed, end, self.leasekeeper.snapshot())
        return {p: max(o, 0) for p, o in committed.items()} == end

    def wait_caught_up(self, timeout: float = 30) -> None:
        wait_until(
            self.caught_up, timeout, "commits to reach the end", describe=lambda: self.last_offsets
        )

    def read_topic(self, topic: str) -> list[Message]:
        """Every record of ``topic`` up to its current end."""
        consumer = make_consumer(self.kafka, f"reader-{uuid.uuid4().hex[:8]}")
        try:
            partitions = len(
                make_admin(self.kafka).list_topics(topic, timeout=10).topics[topic].partitions
            )
            high = end_offsets(consumer, topic, range(partitions))
            consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
            found: list[Message] = []
            deadline = time.monotonic() + 60
            while len(found) < sum(high.values()) and time.monotonic() < deadline:
                found += [m for m in consumer.consume(500, timeout=1) if m.error() is None]
            return found
        finally:
            consumer.close()

    def job_at_offsets(self) -> dict[tuple[int, int], str]:
        """(partition, offset) → job id, read back from the ready topic."""
        codec = EnvelopeCodec(SchemaRegistry())
        return {
            (m.partition(), m.offset()): codec.decode(m.value()).job_id
            for m in self.read_topic(self.topics.ready)
        }  # type: ignore[misc]

    def codec(self) -> EnvelopeCodec:
        return EnvelopeCodec(SchemaRegistry(extra_dirs=[SCHEMAS]))

    def dead_letters(self) -> list[DeadLetter]:
        codec = self.codec()
        return [codec.decode_dead_letter(m.value()) for m in self.read_topic(self.topics.dlq)]

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        for leasekeeper in self.leasekeepers:
            leasekeeper.stop()

    def log_tails(self, lines: int = 60) -> str:
        """The last ``lines`` lines of each leasekeeper's and worker's log."""
        logs = [lk.log for lk in self.leasekeepers] + [w.log for w in self.workers]
        parts = []
        for path in dict.fromkeys(logs):  # a restart in place appends to the same log
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"----- {path.name} (last {lines} lines) -----\n{tail}\n")
        return "".join(parts)


@contextmanager
def private_system(tmp_path: Path, queue: str) -> Iterator[tuple[LocalKafka, System]]:
    """A ``System`` on a one-broker Kafka of the test's own, for tests that kill or
    restart it (the shared one serves the other tests); skipped if it cannot start."""
    cluster = LocalKafka(distribution=obtain(), workdir=tmp_path / "kafka", heap="384m")
    try:
        cluster.start()
    except KafkaUnavailable as exc:
        cluster.stop(grace=5)
        pytest.skip(f"a Kafka of this test's own could not start: {exc}")
    (tmp_path / "system").mkdir()
    system = System(KafkaSettings(bootstrap=cluster.bootstrap), queue, tmp_path / "system")
    try:
        yield cluster, system
    finally:
        system.stop()
        cluster.stop()
