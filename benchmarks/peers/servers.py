"""Private Redis and PostgreSQL servers for the peer queues, from Debian's packages.

The benchmark installs a missing server with ``apt-get`` (when it may: root,
and not in quick mode) and runs its own instance on a free loopback port in a
scratch directory, so it never touches a server someone else runs. Both are
configured for durability comparable to ours, and the report says how:
Redis appends every write to its AOF and fsyncs it every second; PostgreSQL
fsyncs the WAL at every commit (``synchronous_commit=on``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import procs
from devtools.localkafka import free_port


class Unavailable(RuntimeError):
    """A peer cannot run here; the message is the reason the report shows."""


def redis_bin() -> str | None:
    return shutil.which("redis-server")


def postgres_bin(name: str) -> Path | None:
    """``/usr/lib/postgresql/<newest>/bin/<name>``: Debian keeps server binaries off PATH."""
    found = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]) if found else None


def ensure_package(package: str, present: bool, allow_install: bool) -> None:
    """Install a Debian package unless it is present; raise Unavailable with the reason."""
    if present:
        return
    if not allow_install:
        raise Unavailable(f"{package} is not installed and this run installs nothing (quick mode)")
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(f"{package} is not installed and apt-get needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode == 0:
        return
    subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
    done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise Unavailable(f"apt-get install {package} failed: {done.stderr.strip()[-300:]}")


@dataclass
class RedisServer:
    """``redis-server`` with AOF on (``appendfsync everysec``) and RDB snapshots off."""

    pinning: procs.Pinning
    allow_install: bool
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-redis-")))

    SETTINGS = "appendonly yes, appendfsync everysec, no RDB snapshots"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        ensure_package("redis-server", redis_bin() is not None, self.allow_install)
        cmd = [
            *self.pinning.server_prefix(), str(redis_bin()),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
            "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--protected-mode", "no", "--daemonize", "no",
        ]  # fmt: skip
        self.process = procs.start(cmd, log=self.workdir / "redis.log")
        procs.wait_until(self._answers, 30, "redis to answer PING", step=0.1)
        return self

    def _answers(self) -> bool:
        import redis

        if self.process is not None and self.process.poll() is not None:
            raise Unavailable(f"redis-server exited: {(self.workdir / 'redis.log').read_text()}")
        try:
            return bool(redis.Redis.from_url(self.url).ping())
        except redis.RedisError:
            return False

    def pids(self) -> list[int]:
        return [self.process.pid] if self.process else []

    def stop(self) -> None:
        procs.stop(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class PostgresServer:
    """A private PostgreSQL cluster (``initdb`` + ``postgres``) as the ``postgres`` user."""

    pinning: procs.Pinning
    allow_install: bool
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-pg-")))

    SETTINGS = "synchronous_commit=on, fsync=on, shared_buffers=256MB, a private cluster"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def start(self) -> PostgresServer:
        ensure_package("postgresql", postgres_bin("postgres") is not None, self.allow_install)
        # initdb refuses to run as root: the cluster belongs to the postgres user.
        user = "postgres" if os.geteuid() == 0 else None
        if user:
            shutil.chown(self.workdir, user, user)
        data = self.workdir / "data"
        initdb = [str(postgres_bin("initdb")), "-D", str(data), "-U", "postgres", "-A", "trust"]
        done = subprocess.run(initdb, capture_output=True, text=True, user=user, check=False)
        if done.returncode != 0:
            raise Unavailable(f"initdb failed: {done.stderr.strip()[-300:]}")
        cmd = [
            *self.pinning.server_prefix(), str(postgres_bin("postgres")), "-D", str(data),
            "-p", str(self.port), "-k", str(self.workdir), "-c", "listen_addresses=127.0.0.1",
            "-c", "synchronous_commit=on", "-c", "fsync=on", "-c", "shared_buffers=256MB",
            "-c", "max_connections=200",
        ]  # fmt: skip
        self.process = procs.start(cmd, log=self.workdir / "postgres.log", user=user)
        procs.wait_until(self._answers, 60, "postgres to accept connections", step=0.2)
        return self

    def _answers(self) -> bool:
        import psycopg

        if self.process is not None and self.process.poll() is not None:
            raise Unavailable("postgres exited during start-up")
        try:
            psycopg.connect(self.dsn, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            time.sleep(0.1)
            return False

    def pids(self) -> list[int]:
        return [self.process.pid] if self.process else []

    def stop(self) -> None:
        procs.stop(self.process, grace=20)
        shutil.rmtree(self.workdir, ignore_errors=True)
