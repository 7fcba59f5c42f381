"""The README's tour, worker module and producer example, run as a user runs them."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.system import wait_until

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent
BLOCK = re.compile(r"^```(\w+)(?: ([\w.]+))?\n(.*?)^```", re.S | re.M)


def readme_blocks() -> dict[str, str]:
    """Named blocks (```python receipts.py, ```sh tour) by name."""
    return {name: body for _, name, body in BLOCK.findall(README.read_text()) if name}


def test_readme_has_the_examples_this_test_runs() -> None:
    assert {"tour", "receipts.py", "enqueue.py", "priorities", "tenants.toml"} <= set(
        readme_blocks()
    )


def test_the_readme_priorities_example_runs(
    tmp_path: Path, kafka_bootstrap: str, unique: str
) -> None:
    """The ``password_reset`` enqueue and the ``serve`` line with its ``tenants.toml``, as
    written, on a queue of this test's own prefix: the job is sent, and the leasekeeper
    starts with those flags and that file and holds the job."""
    blocks = readme_blocks()
    (tmp_path / "tenants.toml").write_text(blocks["tenants.toml"])
    env = {**os.environ, "KAFKA_BOOTSTRAP": kafka_bootstrap, "XDG_RUNTIME_DIR": str(tmp_path),
           "JOBS_TOPIC_PREFIX": f"readme{unique}"}  # fmt: skip
    env.pop("LEASEKEEPER_TARGET", None)
    _shell(f"{BIN}/producer create-queue --queue emails --partitions 1", tmp_path, env)
    background: list[subprocess.Popen[bytes]] = []
    try:
        lines = blocks["priorities"].strip().splitlines()
        job_id = _run_line(lines[0], tmp_path, env, background).strip()
        assert re.fullmatch(r"[0-9a-f]{32}", job_id), job_id
        _run_line(lines[1], tmp_path, env, background)
        inspect = f"{BIN}/leasekeeper inspect --queue emails --json"
        wait_until(lambda: _inspect_ok(inspect, tmp_path, env), 60, "the leasekeeper to answer")
        job = f"{BIN}/leasekeeper inspect job {job_id} --queue emails"
        wait_until(lambda: _inspect_ok(job, tmp_path, env), 60, "the leasekeeper to hold the job")
    finally:
        for process in background:
            process.terminate()
            process.wait(30)


def _command(line: str, tmp: Path) -> str:
    return line.replace(".venv/bin/", f"{BIN}/").replace("/tmp/kafka-lease-queue", str(tmp))


def test_the_readme_tour_runs(tmp_path: Path) -> None:
    blocks = readme_blocks()
    for name in ("receipts.py", "enqueue.py"):
        (tmp_path / name).write_text(blocks[name])
    env = {
        **os.environ,
        "LOCAL_KAFKA_DIR": str(tmp_path / "kafka"),
        "PYTHONPATH": str(tmp_path),
        # The default sockets (one per queue) go here, not into this user's own directory.
        "XDG_RUNTIME_DIR": str(tmp_path),
    }
    for name in ("KAFKA_BOOTSTRAP", "LEASEKEEPER_TARGET"):
        env.pop(name, None)  # the tour starts its own broker and finds its own socket
    background: list[subprocess.Popen[bytes]] = []
    outputs: list[str] = []
    try:
        for line in blocks["tour"].strip().splitlines():
            outputs.append(_run_line(line, tmp_path, env, background))
        job_id = outputs[4].strip()
        assert re.fullmatch(r"[0-9a-f]{32}", job_id), outputs[4]
        assert "partitions" in outputs[5]
        worker_log = tmp_path / "bg-1.log"
        wait_until(lambda: job_id in worker_log.read_text(), 60, "the worker to send receipt 42")

        example = subprocess.run(
            [sys.executable, "enqueue.py"], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert example.returncode == 0, example.stderr
        assert "enqueued 100" in example.stdout
        assert "order_id" in example.stdout  # the PayloadError names the field
        wait_until(
            lambda: worker_log.read_text().count("receipt for order") >= 102,
            60,
            "the worker to send the batch",
        )
        for log in (tmp_path / "bg-0.log", worker_log):  # client logs go through logging
            assert not re.search(r"^%\d\|", log.read_text(), re.M), log.read_text()
    finally:
        for process in background:
            process.terminate()
            process.wait(30)
        subprocess.run(
            [f"{BIN}/leasekeeper", "dev", "kafka", "stop"], env=env, timeout=60, check=False
        )


def _run_line(
    line: str, tmp: Path, env: dict[str, str], background: list[subprocess.Popen[bytes]]
) -> str:
    command = _command(line, tmp)
    if command.startswith("export "):
        name, value = command.removeprefix("export ").split("=", 1)
        if value.startswith("$(") and value.endswith(")"):
            value = _shell(value[2:-1], tmp, env).strip().splitlines()[-1]
        env[name] = value
        return value
    if command.endswith("&"):
        with (tmp / f"bg-{len(background)}.log").open("wb") as log:
            background.append(
                subprocess.Popen(
                    shlex.split(command[:-1]), cwd=tmp, env={**env, "PYTHONUNBUFFERED": "1"},
                    stdout=log, stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        return ""
    if "leasekeeper inspect" in command:
        wait_until(lambda: _inspect_ok(command, tmp, env), 60, "inspect to answer")
    return _shell(command, tmp, env)


def _inspect_ok(command: str, tmp: Path, env: dict[str, str]) -> bool:
    result = subprocess.run(command, shell=True, cwd=tmp, env=env, capture_output=True)
    return result.returncode == 0


def _shell(command: str, tmp: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        command, shell=True, cwd=tmp, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"{command!r} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout
