"""``workers run`` as real processes against a fake LeaseKeeper: signals and --processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_worker_support import Envelopes, FakeLeaseKeeper, serving, wait_until

APP_SOURCE = """
import time
from workers import App

app = App("it")

@app.job("noop")
def noop(ctx, payload):
    time.sleep(payload["n"] / 1000)  # n is the run time in ms
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "itjobs.py").write_text(APP_SOURCE)
    return tmp_path


def _start(workdir: Path, target: str, *args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "LEASEKEEPER_TOKEN"}
    command = [sys.executable, "-m", "workers", "run", "itjobs:app", "--target", target, *args]
    return subprocess.Popen(
        command, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _finish(process: subprocess.Popen[bytes], timeout: float = 30) -> tuple[int, str]:
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        raise AssertionError(f"workers run did not exit:\n{out.decode()}") from None
    return process.returncode, out.decode()


def test_sigterm_lets_the_running_job_finish_then_exits_zero(workdir: Path) -> None:
    envelopes = Envelopes()
    fake = FakeLeaseKeeper([envelopes("noop", {"n": 700})])
    with serving(fake, workdir / "lk.sock") as target:
        process = _start(workdir, target, "--worker-id", "solo")
        try:
            wait_until(lambda: len(fake.outstanding) == 1, timeout=30, what="a job in hand")
            process.send_signal(signal.SIGTERM)
            code, output = _finish(process)
        finally:
            process.kill()
    assert code == 0, output
    assert [s.outcome for s in fake.settled] == ["ack"], output
    assert "stopping" in output


def test_processes_start_distinct_workers_and_sigterm_stops_them_all(workdir: Path) -> None:
    envelopes = Envelopes()
    fake = FakeLeaseKeeper([envelopes("noop", {"n": 50}) for _ in range(40)])
    with serving(fake, workdir / "lk.sock") as target:
        process = _start(
            workdir, target, "--processes", "2", "--concurrency", "2", "--worker-id", "pod"
        )
        try:
            wait_until(lambda: fake.worker_ids == {"pod-0", "pod-1"}, timeout=30, what="2 workers")
            wait_until(lambda: len(fake.outcomes("ack")) == 40, timeout=30, what="40 acks")
            process.send_signal(signal.SIGTERM)
            code, output = _finish(process)
        finally:
            process.kill()
    assert code == 0, output
    assert output.count("stopped") >= 2, output
