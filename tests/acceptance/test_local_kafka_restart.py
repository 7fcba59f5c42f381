"""``leasekeeper dev kafka stop`` then ``start`` brings the local Kafka back as a real
broker restarts: at the same address (the exported ``KAFKA_BOOTSTRAP``, a running
leasekeeper and the dashboard still name it), with its topics and jobs. Wiping is
``dev kafka reset``, asked for. Run as a user runs it: as processes, in a state dir
of the test's own (two broker starts in all: the machine is shared)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.localkafka import KafkaUnavailable, obtain
from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaSettings,
    Message,
    TopicPartition,
    make_admin,
    make_consumer,
)
from schemas.codec import EnvelopeCodec, SchemaRegistry

BIN = Path(sys.executable).parent
GUARD_S = 180  # only a guard against a hang
RECEIPT = '{"order_id": 42, "email": "a@example.com", "amount_cents": 1999}'


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A cluster directory of this test's own, wiped (and its broker stopped) after."""
    try:
        obtain()
    except KafkaUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Kafka could not be obtained in CI: {exc}", pytrace=False)
        pytest.skip(f"Kafka could not be obtained: {exc}")
    directory = tmp_path / "kafka"
    yield directory
    dev_kafka(directory, "stop", "--grace", "5s")
    dev_kafka(directory, "reset", "--yes")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP", "LOCAL_KAFKA_DIR")}


def dev_kafka(directory: Path, *args: str, answer: str = "") -> subprocess.CompletedProcess[str]:
    command = [str(BIN / "leasekeeper"), "dev", "kafka", "--state-dir", str(directory), *args]
    return subprocess.run(
        command,
        input=answer,
        env=env(),
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )


def producer(bootstrap: str, *args: str) -> str:
    result = subprocess.run(
        [str(BIN / "producer"), *args],
        env={**env(), "KAFKA_BOOTSTRAP": bootstrap},
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def queued_job_ids(bootstrap: str, topic: str) -> list[str]:
    settings = KafkaSettings(bootstrap=bootstrap, client_id="tests")
    consumer = make_consumer(settings, f"reader-{time.monotonic_ns()}")
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got: list[Message] = []
    deadline = time.monotonic() + 30  # a guard: one record is asked for
    try:
        while not got and time.monotonic() < deadline:
            got.extend(consumer.consume(10, timeout=0.5))
    finally:
        consumer.close()
    codec = EnvelopeCodec(SchemaRegistry())
    return [codec.decode(msg.value()).job_id for msg in got]


def run_the_job(bootstrap: str, job_id: str, work: Path) -> None:
    """A leasekeeper and the README's worker pool on ``bootstrap`` run ``job_id``."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    module = readme.split("```python receipts.py\n", 1)[1].split("```", 1)[0]
    (work / "receipts.py").write_text(module)
    target = f"unix:{work / 'lk.sock'}"
    environment = {**env(), "KAFKA_BOOTSTRAP": bootstrap, "PYTHONPATH": str(work)}
    commands = [
        [str(BIN / "leasekeeper"), "serve", "--queue", "emails", "--state-dir",
         str(work / "state"), "--listen", target],
        [str(BIN / "workers"), "run", "receipts:app", "--target", target],
    ]  # fmt: skip
    processes = [
        subprocess.Popen(
            c, cwd=work, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for c in commands
    ]
    try:
        deadline = time.monotonic() + GUARD_S
        while True:
            status = subprocess.run(
                [str(BIN / "producer"), "status", "--queue", "emails", job_id],
                env=environment, capture_output=True, text=True, timeout=GUARD_S, check=False,
            )  # fmt: skip
            if status.returncode == 0:
                break
            assert time.monotonic() < deadline, status.stdout + status.stderr
            time.sleep(0.5)  # another process's progress: polled
        assert "succeeded" in status.stdout, status.stdout
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_a_stopped_local_kafka_starts_again_with_its_address_topics_and_jobs(
    state_dir: Path,
) -> None:
    started = dev_kafka(state_dir, "start")
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    producer(bootstrap, "create-queue", "emails", "--partitions", "1")
    job_id = producer(
        bootstrap, "enqueue", "emails", "send_receipt", "--tenant", "acme", "--payload", RECEIPT
    )
    stopped = dev_kafka(state_dir, "stop")
    assert stopped.returncode == 0, stopped.stderr

    port = int(bootstrap.rpartition(":")[2])
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        refused = dev_kafka(state_dir, "start")
    assert refused.returncode == 2, refused.stderr
    assert f"port {port}" in refused.stderr and "--port" in refused.stderr
    assert "Traceback" not in refused.stderr

    again = dev_kafka(state_dir, "start")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == bootstrap
    topics = make_admin(KafkaSettings(bootstrap=bootstrap)).list_topics(timeout=10).topics
    assert "jobs.emails" in topics
    assert queued_job_ids(bootstrap, "jobs.emails") == [job_id]
    # The rest of the tour runs on the restarted broker: the job enqueued before the
    # stop is leased, run and recorded.
    run_the_job(bootstrap, job_id, state_dir.parent)

    declined = dev_kafka(state_dir, "reset", answer="n\n")
    assert declined.returncode == 1, declined.stdout + declined.stderr
    assert "Delete every topic and job" in declined.stdout
    assert dev_kafka(state_dir, "status").stdout.strip() == bootstrap  # still running

    wiped = dev_kafka(state_dir, "reset", "--yes")
    assert wiped.returncode == 0, wiped.stderr
    assert dev_kafka(state_dir, "status").returncode == 1
    assert not list(state_dir.glob("node-*"))
