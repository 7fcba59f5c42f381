"""The harness side of each peer: load its queue, start its workers, stop them.

Every peer gets the same shape of work as ours: jobs carrying ``n`` and the
same ~100-byte blob, 20 tenants (as a field: these queues have no keys), the
same number of worker processes and handler slots per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from benchmarks import procs, progress
from benchmarks.context import REPO
from benchmarks.peers import pgqueue
from benchmarks.peers.servers import PostgresServer, RedisServer

PYTHON = sys.executable


class Peer(Protocol):
    name: str
    settings: str

    def load(self, jobs: int, blob: str, tenants: int, sleep_ms: float) -> None: ...

    def start_workers(
        self, processes: int, slots: int, sleep_ms: float, progress_dir: Path
    ) -> None: ...

    def server_pids(self) -> list[int]: ...

    def worker_pids(self) -> list[int]: ...

    def stop_workers(self) -> None: ...


def _env(progress_dir: Path, **extra: str) -> dict[str, str]:
    return {progress.ENV_DIR: str(progress_dir), "PYTHONPATH": str(REPO), **extra}


@dataclass
class _Workers:
    running: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def pids(self) -> list[int]:
        return [p.pid for p in self.running if p.poll() is None]

    def stop(self) -> None:
        for process in self.running:
            procs.stop(process, grace=15)
        self.running = []


@dataclass
class CeleryPeer:
    redis: RedisServer
    name: str = "celery (redis)"
    settings: str = "acks_late, prefetch multiplier 4, threads pool, no result backend"
    workers: _Workers = field(default_factory=_Workers)

    def load(self, jobs: int, blob: str, tenants: int, sleep_ms: float) -> None:
        os.environ["BENCH_REDIS_URL"] = self.redis.url
        from benchmarks.peers import celery_app

        celery_app.app.conf.broker_url = self.redis.url
        _flush(self.redis)
        with celery_app.app.producer_or_acquire() as producer:
            for n in range(jobs):
                if sleep_ms:
                    celery_app.io.apply_async((n, blob, sleep_ms), producer=producer)
                else:
                    celery_app.noop.apply_async((n, blob), producer=producer)

    def start_workers(
        self, processes: int, slots: int, sleep_ms: float, progress_dir: Path
    ) -> None:
        env = _env(progress_dir, BENCH_REDIS_URL=self.redis.url)
        for i in range(processes):
            cmd = [
                PYTHON, "-m", "celery", "-A", "benchmarks.peers.celery_app", "worker",
                "--pool", "threads", "--concurrency", str(slots), "-n", f"w{i}@bench",
                "-Q", "bench", "--without-gossip", "--without-mingle", "--without-heartbeat",
                "--loglevel", "WARNING",
            ]  # fmt: skip
            log = progress_dir / f"celery-{i}.log"
            self.workers.running.append(procs.start(cmd, log=log, env=env, cwd=REPO))

    def server_pids(self) -> list[int]:
        return self.redis.pids()

    def worker_pids(self) -> list[int]:
        return self.workers.pids()

    def stop_workers(self) -> None:
        self.workers.stop()


@dataclass
class DramatiqPeer:
    redis: RedisServer
    name: str = "dramatiq (redis)"
    settings: str = "default middleware (acks after the actor ran), max_retries 3"
    workers: _Workers = field(default_factory=_Workers)

    def load(self, jobs: int, blob: str, tenants: int, sleep_ms: float) -> None:
        os.environ["BENCH_REDIS_URL"] = self.redis.url
        from benchmarks.peers import dramatiq_app

        _flush(self.redis)
        for n in range(jobs):
            if sleep_ms:
                dramatiq_app.io.send(n, blob, sleep_ms)
            else:
                dramatiq_app.noop.send(n, blob)

    def start_workers(
        self, processes: int, slots: int, sleep_ms: float, progress_dir: Path
    ) -> None:
        cmd = [
            PYTHON, "-m", "dramatiq", "benchmarks.peers.dramatiq_app",
            "--processes", str(processes), "--threads", str(slots), "--queues", "bench",
        ]  # fmt: skip
        env = _env(progress_dir, BENCH_REDIS_URL=self.redis.url)
        log = progress_dir / "dramatiq.log"
        self.workers.running.append(procs.start(cmd, log=log, env=env, cwd=REPO))

    def server_pids(self) -> list[int]:
        return self.redis.pids()

    def worker_pids(self) -> list[int]:
        return self.workers.pids()

    def stop_workers(self) -> None:
        self.workers.stop()


@dataclass
class PostgresPeer:
    postgres: PostgresServer
    name: str = "postgres skip locked"
    settings: str = (
        "claim N rows FOR UPDATE SKIP LOCKED, delete when done, autocommit, "
        "no-op: 4 threads x batch 16 per process; I/O: 8 threads x batch 1"
    )
    workers: _Workers = field(default_factory=_Workers)

    def load(self, jobs: int, blob: str, tenants: int, sleep_ms: float) -> None:
        pgqueue.prepare(self.postgres.dsn)
        pgqueue.load(
            self.postgres.dsn,
            ((f"tenant-{n % tenants}", json.dumps({"n": n, "blob": blob})) for n in range(jobs)),
        )

    def start_workers(
        self, processes: int, slots: int, sleep_ms: float, progress_dir: Path
    ) -> None:
        threads, batch = (8, 1) if sleep_ms else (4, max(1, slots // 4))
        threads = min(threads, slots)
        env = _env(progress_dir)
        for i in range(processes):
            cmd = [
                PYTHON, "-m", "benchmarks.peers.pgqueue", "--dsn", self.postgres.dsn,
                "--threads", str(threads), "--batch", str(batch), "--sleep-ms", str(sleep_ms),
            ]  # fmt: skip
            log = progress_dir / f"pg-{i}.log"
            self.workers.running.append(procs.start(cmd, log=log, env=env, cwd=REPO))

    def server_pids(self) -> list[int]:
        return self.postgres.pids()

    def worker_pids(self) -> list[int]:
        return self.workers.pids()

    def stop_workers(self) -> None:
        self.workers.stop()


def _flush(redis_server: RedisServer) -> None:
    import redis

    redis.Redis.from_url(redis_server.url).flushall()
