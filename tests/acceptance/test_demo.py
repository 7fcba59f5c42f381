"""``make run``'s demo, run as a process and stopped the way a terminal's Ctrl-C stops
it: SIGINT to its whole process group.

The first test lets the demo start its own Kafka, as ``make run`` does, since a
broker in the terminal's process group is what stopped first and made the
leasekeeper lose its last commit. The second runs it on the suite's Kafka, which
outlives the demo, to read the status topic afterwards, and looks at every page's
content on the way. Each outer timeout only guards against a hang.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from devtools.waiting import wait_until
from jobcore.kafka import (
    OFFSET_BEGINNING,
    KafkaSettings,
    TopicPartition,
    end_offsets,
    make_consumer,
)

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
KAFKA_START_S = 180
GUARD_S = 60
LINK = re.compile(r"(http://127\.0\.0\.1:(\d+))/login\?token=([\w-]+)")
SUCCEEDED = re.compile(r"job (\w+) \(\w+\) succeeded")
DEAD = re.compile(r"dead-lettered job (\w+)")
CRON_ENTRY = "thumbnail-sweep"
LOSS = ("status records were not written", "dropped")


@dataclass
class DemoRun:
    process: subprocess.Popen[bytes]
    output: Path
    workdir: Path

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def log(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""

    def link(self, timeout: float) -> re.Match[str]:
        wait_until(
            lambda: "dashboard at" in self.text() or self.process.poll() is not None,
            timeout=timeout,
            what="the demo's dashboard line",
        )
        found = LINK.search(self.text())
        assert found is not None, self.text()
        return found

    def interrupt(self) -> int:
        """Ctrl-C in the terminal: SIGINT to the foreground process group."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(GUARD_S)

    def stopped(self) -> list[str]:
        return [line for line in self.text().splitlines() if line.startswith("stopped: ")]


@pytest.fixture
def port_8700_taken() -> Iterator[None]:
    """Someone else's dashboard on 8700 (or whatever holds it already)."""
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", 8700))
            holder.listen()
        except OSError:
            pass  # taken already: just as good
        yield


def start_demo(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> DemoRun:
    output = tmp_path / "demo.out"
    workdir = tmp_path / "work"
    clean = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP", "LOG_LEVEL")}
    with output.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "devtools.demo", "--workdir", str(workdir), *args],
            cwd=ROOT,
            env={**clean, "COLUMNS": "200", **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a terminal's job is
        )
    return DemoRun(process=process, output=output, workdir=workdir)


@pytest.fixture
def demos() -> Iterator[list[DemoRun]]:
    """Demos a failed test left running, stopped in order (their children and Kafka
    are in sessions of their own: killing the demo would orphan them)."""
    started: list[DemoRun] = []
    yield started
    for demo in started:
        if demo.process.poll() is None:
            try:
                demo.interrupt()
            except subprocess.TimeoutExpired:
                os.killpg(demo.process.pid, signal.SIGKILL)
                demo.process.wait()


@pytest.mark.slow  # starts a Kafka of its own, as `make run` does
def test_ctrl_c_stops_producer_workers_leasekeeper_then_its_own_kafka(
    tmp_path: Path, demos: list[DemoRun]
) -> None:
    demo = start_demo(tmp_path)
    demos.append(demo)
    demo.link(KAFKA_START_S)
    wait_until(
        lambda: DEAD.search(demo.log("leasekeeper.log")) is not None,
        timeout=GUARD_S,
        what="the leasekeeper settling its first jobs",
    )
    assert demo.interrupt() == 0, demo.text()
    stopped = demo.stopped()
    assert [line.split(" (")[0].split(" exited")[0] for line in stopped] == [
        "stopped: producer",
        "stopped: cron scheduler",
        "stopped: worker 0",
        "stopped: worker 1",
        "stopped: leasekeeper",
        "stopped: dashboard",
        "stopped: Kafka",
    ], demo.text()
    assert "stopped: leasekeeper exited with 0" in stopped, demo.text()
    assert not any("killed" in line for line in stopped), demo.text()
    # Stopped by the demo, not by the terminal's Ctrl-C: the broker names the signal.
    broker = demo.log("kafka/node-1/server.log")
    assert re.findall(r"Terminating process due to signal (\w+)", broker) == ["SIGTERM"]
    leasekeeper = demo.log("leasekeeper.log")
    assert leasekeeper.rstrip().endswith("leasekeeper stopped"), leasekeeper[-2000:]
    assert not any(loss in leasekeeper for loss in LOSS), leasekeeper[-2000:]


def get(base: str, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    split = urlsplit(base)
    connection = http.client.HTTPConnection(split.hostname or "", split.port, timeout=10)
    connection.request("GET", path, headers=headers or {})
    return connection.getresponse()


def dlq_depth(base: str, queue: str) -> int:
    overview = json.loads(get(base, "/api/overview").read())
    return int(overview["queues"].get(queue, {}).get("dlq_depth") or 0)


def waiting_in_tiers(base: str, queue: str) -> int:
    page = get(base, "/scheduled").read().decode()
    found = re.findall(rf"jobs\.{queue}\.retry\.\w+</td><td[^>]*>(\d+)<", page)
    return sum(int(n) for n in found)


def status_keys(kafka: KafkaSettings, topic: str) -> set[str]:
    """Every key of ``topic``, read from its beginning to its end."""
    consumer = make_consumer(kafka, f"reader-{topic}")
    try:
        partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = end_offsets(consumer, topic, partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        keys: set[str] = set()
        read = dict.fromkeys(partitions, -1)

        def caught_up() -> bool:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None:
                    keys.add((message.key() or b"").decode())
                    read[message.partition()] = message.offset()
            return all(read[p] >= ends[p] - 1 for p in partitions)

        wait_until(caught_up, timeout=GUARD_S, step=0, what=f"the end of {topic}")
        return keys
    finally:
        consumer.close()


def test_the_demo_shows_every_page_and_loses_no_status_record(
    kafka: KafkaSettings,
    unique: str,
    tmp_path: Path,
    demos: list[DemoRun],
    port_8700_taken: None,
) -> None:
    queue = f"demo{unique}"
    demo = start_demo(
        tmp_path,
        "--bootstrap", kafka.bootstrap, "--queue", queue,
        env={"LOG_LEVEL": "debug"},  # the workers then name every job they finish
    )  # fmt: skip
    demos.append(demo)
    found = demo.link(GUARD_S)
    base, port, token = found.group(1), int(found.group(2)), found.group(3)
    assert port != 8700 and "(8700 is taken)" in demo.text(), demo.text()

    wait_until(lambda: _answers(base), timeout=GUARD_S, what="the dashboard")
    wrong = get(base, "/login?token=not-the-token")
    assert wrong.status == 403 and wrong.getheader("Set-Cookie") is None
    login = get(base, found.group(0).removeprefix(base))
    assert login.status == 303 and login.getheader("Location") == "/"
    cookie = login.getheader("Set-Cookie") or ""
    assert cookie.startswith(f"dashboard_token={token};"), cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie, cookie

    wait_until(lambda: dlq_depth(base, queue) >= 1, timeout=GUARD_S, what="a dead letter")
    wait_until(lambda: waiting_in_tiers(base, queue) >= 1, timeout=GUARD_S, what="a delayed job")
    wait_until(
        lambda: f'class="cron-entry">{CRON_ENTRY}<' in get(base, "/scheduled").read().decode(),
        timeout=GUARD_S,
        what="the cron entry on the Scheduled page",
    )
    dead = DEAD.search(demo.log("leasekeeper.log"))
    assert dead is not None
    job = json.loads(get(base, f"/api/job?id={dead.group(1)}&queue={queue}").read())
    assert job["state"] == "dead", job

    assert demo.interrupt() == 0, demo.text()
    assert "stopped: leasekeeper exited with 0" in demo.stopped(), demo.text()
    finished = {
        job_id
        for name in ("worker-0.log", "worker-1.log")
        for job_id in SUCCEEDED.findall(demo.log(name))
    }
    assert finished, demo.log("worker-0.log")[-2000:]
    missing = finished - status_keys(kafka, f"jobs.{queue}.status")
    assert not missing, f"{len(missing)} of {len(finished)} finished jobs have no status record"


def _answers(base: str) -> bool:
    try:
        return get(base, "/").status == 200
    except OSError:
        return False
