"""Run the real processes (leasekeeper, workers) the way a user does, for system tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from leasekeeper.inspect_view import fetch_snapshot

BIN = Path(sys.executable).parent


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    step: float = 0.05,
    describe: Callable[[], object] | None = None,
) -> None:
    """Poll ``predicate`` until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    state = f": {describe()}" if describe is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{state}")


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
        def ready() -> bool:
            self.assert_alive()
            snap = self.snapshot()
            return snap is not None and len(snap["partitions"]) >= partitions

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


@dataclass(kw_only=True)
class WorkerProcess:
    """One ``workers run`` process."""

    app: str
    target: str
    log: Path
    env: dict[str, str]
    concurrency: int = 8
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        cmd = [
            str(BIN / "workers"),
            "run",
            self.app,
            "--target", self.target,
            "--concurrency", str(self.concurrency),
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
