"""Our queue as a user runs it: ``leasekeeper serve`` plus ``workers run`` processes.

Each run gets its own consumer group and state directory, so the same backlog
can be drained again from offset 0 by the next run.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from benchmarks import procs, progress
from benchmarks.context import REPO, SCHEMA_DIR
from jobcore.kafka import (
    Consumer,
    KafkaException,
    KafkaSettings,
    committed_offsets,
    end_offsets,
    make_consumer,
)
from jobcore.topics import QueueTopics
from leasekeeper.views.inspect_view import fetch_snapshot

BIN = Path(sys.executable).parent


@dataclass
class OurSystem:
    """One leasekeeper and its worker processes under ``workdir``."""

    settings: KafkaSettings
    queue: str
    workdir: Path
    partitions: int
    lease_s: float = 30.0
    # Prepended to every command: ``taskset`` to lift the clients' pinning.
    prefix: list[str] = field(default_factory=list)
    # Registry mode: this Schema Registry URL goes to the leasekeeper and every worker.
    schema_registry: str | None = None
    group_id: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:8]}")
    leasekeeper: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _probe: Consumer | None = None

    def __post_init__(self) -> None:
        self.progress_dir = self.workdir / "progress"
        self.progress_dir.mkdir(parents=True, exist_ok=True)
        self.socket = self.workdir / "lk.sock"
        self.topic = QueueTopics(queue=self.queue).ready

    @property
    def target(self) -> str:
        return f"unix:{self.socket}"

    def start_leasekeeper(self, *extra: str) -> None:
        cmd = [
            *self.prefix, str(BIN / "leasekeeper"), "serve",
            "--queue", self.queue,
            "--bootstrap", self.settings.bootstrap,
            "--state-dir", str(self.workdir / "state"),
            "--listen", self.target,
            "--group-id", self.group_id,
            "--instance-id", f"{self.group_id}-lk",
            "--lease", str(self.lease_s),
            "--schema-path", str(SCHEMA_DIR),
            "--log-level", "WARNING",
            *self._codec_args(),
            *extra,
        ]  # fmt: skip
        self.leasekeeper = procs.start(cmd, log=self.workdir / "leasekeeper.log", cwd=REPO)
        procs.wait_until(self._assigned, 90, "the leasekeeper to own its partitions", step=0.1)

    def _codec_args(self) -> list[str]:
        return ["--schema-registry", self.schema_registry] if self.schema_registry else []

    def _assigned(self) -> bool:
        if self.leasekeeper is None or self.leasekeeper.poll() is not None:
            raise RuntimeError(f"leasekeeper exited: {self.log_tail('leasekeeper.log')}")
        snap = self.snapshot()
        # Settled in: every topic family's consumer got its assignment (they join the
        # group one rebalance after another, seconds apart) and its leases are re-read.
        return (
            snap is not None
            and len(snap["partitions"]) >= self.partitions
            and not snap.get("settling_in", False)
        )

    def snapshot(self) -> dict[str, Any] | None:
        try:
            return fetch_snapshot(self.target, None, timeout=5)
        except grpc.RpcError:
            return None

    def start_workers(
        self,
        app: str,
        count: int,
        concurrency: int,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        for _ in range(count):
            index = len(self.workers)
            cmd = [
                *self.prefix, str(BIN / "workers"), "run", f"benchmarks.apps:{app}",
                "--target", self.target,
                "--concurrency", str(concurrency),
                "--worker-id", f"w{index}",
                "--schema-path", str(SCHEMA_DIR),
                "--grace", "5",
                "--log-level", "WARNING",
                *self._codec_args(),
                *extra,
            ]  # fmt: skip
            environment = {progress.ENV_DIR: str(self.progress_dir), **(env or {})}
            log = self.workdir / f"worker-{index}.log"
            self.workers.append(procs.start(cmd, log=log, env=environment, cwd=REPO))

    def leasekeeper_pids(self) -> list[int]:
        return [self.leasekeeper.pid] if self.leasekeeper else []

    def worker_pids(self) -> list[int]:
        return [w.pid for w in self.workers if w.poll() is None]

    def caught_up(self) -> bool:
        """Committed offsets equal end offsets on every partition (the durable "done")."""
        if self._probe is None:
            self._probe = make_consumer(self.settings, self.group_id)
        parts = range(self.partitions)
        try:
            committed = committed_offsets(self._probe, self.topic, parts)
            end = end_offsets(self._probe, self.topic, parts)
        except KafkaException:  # coordinator busy: ask again at the next poll
            return False
        return all(max(committed[p], 0) >= end[p] for p in parts)

    def log_tail(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace")[-600:] if path.exists() else "(no log)"

    def stop(self, kill: bool = False) -> None:
        """SIGTERM everything (or SIGKILL: when jobs were left in flight on purpose)."""
        if kill and self.leasekeeper is not None and self.leasekeeper.poll() is None:
            procs.kill(self.leasekeeper)
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        for worker in self.workers:
            procs.stop(worker, grace=10)
        procs.stop(self.leasekeeper, grace=20)
