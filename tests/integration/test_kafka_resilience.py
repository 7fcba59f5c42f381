"""A leasekeeper outlives an unreachable Kafka, fails clearly on setup mistakes, and
reads control topics whose records expired."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import urllib.request
from pathlib import Path

from devtools.localkafka import free_port
from jobcore.control import Cancellation
from jobcore.kafka import (
    Consumer,
    KafkaError,
    KafkaSettings,
    delete_records,
    make_consumer,
    make_producer,
)
from jobcore.topics import QueueTopics
from leasekeeper.core.control_state import ControlState
from leasekeeper.kafka.consumer_loop import REJOINS
from leasekeeper.kafka.control_feed import ControlFeed
from leasekeeper.kafka.family_consumer import family_instance_id
from producer import ensure_queue_topics
from tests.system import PARTITIONS, Leasekeeper, System, private_system, wait_until


class Forwarder:
    """A TCP port that forwards to the broker once opened: "the broker comes up".

    Only the bootstrap goes through it; the broker's metadata then names its real
    address, so the clients reach the broker directly from there on."""

    def __init__(self, port: int, target: str) -> None:
        host, _, target_port = target.split(",")[0].rpartition(":")
        self.port = port
        self.target = (host, int(target_port))
        self.server: socket.socket | None = None
        self.sockets: list[socket.socket] = []

    def open(self) -> None:
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for sock in self.sockets:
            _shut(sock)
            sock.close()

    def _accept(self) -> None:
        assert self.server is not None
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(src, dst), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        _shut(dst)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def test_serve_waits_for_kafka_answers_inspect_meanwhile_then_runs_jobs(
    system: System,
) -> None:
    forwarder = Forwarder(free_port(), system.kafka.bootstrap)
    lk = system.leasekeeper
    lk.bootstrap = f"127.0.0.1:{forwarder.port}"  # nothing listens there yet
    metrics_port = free_port()
    lk.extra_args += ["--metrics-port", str(metrics_port)]
    lk.start()
    try:

        def waiting() -> bool:
            lk.assert_alive()
            snap = lk.snapshot()
            log = lk.log.read_text()
            return snap is not None and snap["kafka"] == "down" and "retrying in" in log

        wait_until(waiting, 60, "inspect to answer while the leasekeeper retries")
        assert "leasekeeper_" in _metrics(metrics_port)
        forwarder.open()
        lk.wait_assigned(PARTITIONS, timeout=90)
        system.start(workers=1)
        ids = system.enqueue(20)
        wait_until(lambda: set(system.runs()) >= set(ids), 60, "the jobs to run")
    finally:
        forwarder.close()
    assert "Traceback" not in lk.log.read_text()


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_serve_exits_2_with_one_line_when_the_queue_does_not_exist(
    kafka: KafkaSettings, unique: str, tmp_path: Path
) -> None:
    lk = Leasekeeper(
        queue=f"missing{unique}",
        bootstrap=kafka.bootstrap,
        state_dir=tmp_path / "state",
        socket=tmp_path / "lk.sock",
        log=tmp_path / "lk.log",
    ).start()
    assert lk.process is not None
    try:
        code = lk.process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        lk.kill()
        raise AssertionError(f"serve kept running: {lk.log.read_text()[-2000:]}") from None
    output = lk.log.read_text()
    assert code == 2, output
    assert f"Error: queue topic jobs.missing{unique} does not exist" in output
    assert "producer create-queue" in output
    assert "Traceback" not in output


def test_catch_up_finishes_when_every_control_record_expired(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"q{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    topics = QueueTopics(queue=queue)
    producer = make_producer(kafka)
    cancellation = Cancellation(job_id="j1", cancelled_at_ms=1)
    producer.produce(topics.control, key=cancellation.key, value=cancellation.encode())
    assert producer.flush(30) == 0
    delete_records(kafka, topics.control, [0])  # end offset 1, nothing left to read

    feed = ControlFeed(settings=kafka, topics=topics, state=ControlState(dedupe_window_ms=1000))
    try:
        feed.catch_up(timeout_s=20)
    finally:
        feed.close()


def test_serve_survives_a_broker_outage_while_running(unique: str, tmp_path: Path) -> None:
    with private_system(tmp_path, unique) as (cluster, system):
        system.start(workers=1)
        before = system.enqueue(10)
        wait_until(lambda: set(system.runs()) >= set(before), 60, "the jobs before the outage")
        lk = system.leasekeeper
        before_kill = (lk.snapshot() or {}).get("kafka_last_error")
        cluster.kill_broker(0)

        def noticed() -> bool:
            snapshot = lk.snapshot()  # inspect answers while Kafka is away
            return snapshot is not None and snapshot["kafka_last_error"] not in (None, before_kill)

        wait_until(noticed, 60, "the leasekeeper to notice the outage")
        lk.assert_alive()
        cluster.restart_broker(0)
        after = system.enqueue(10)
        wait_until(lambda: set(system.runs()) >= set(after), 120, "the jobs after the outage")
        lk.assert_alive()


def test_a_leasekeeper_fenced_again_and_again_rejoins_then_exits_non_zero(
    system: System,
) -> None:
    """Another member keeps joining with the leasekeeper's static instance id (a second
    process started with the same --instance-id): the broker fences the leasekeeper (a
    fatal consumer error). Each time it lets go of its partitions and rejoins as a new
    consumer, fencing the other in turn; after ``REJOINS`` rejoins within the window it
    gives up and exits non-zero for its supervisor, naming the likely cause."""
    lk = system.leasekeeper
    lk.start().wait_assigned(PARTITIONS)

    def usurper() -> Consumer:
        consumer = make_consumer(
            system.kafka,
            system.topics.consumer_group,
            **{
                # the static id of the leasekeeper's consumer of the default class
                "group.instance.id": family_instance_id(f"lk-{system.queue}", "default"),
                "session.timeout.ms": 10_000,
                "partition.assignment.strategy": "cooperative-sticky",
            },
        )
        consumer.subscribe([system.topics.ready])
        return consumer

    usurpers = [usurper()]
    try:
        assert lk.process is not None

        def exited() -> bool:
            message = usurpers[-1].poll(0.1)
            error = message.error() if message is not None else None
            if error is not None and (error.fatal() or error.code() == KafkaError._FATAL):
                usurpers[-1].close()  # fenced back by the rejoined leasekeeper: join again
                usurpers.append(usurper())
            return lk.process is not None and lk.process.poll() is not None

        wait_until(exited, 240, "the fenced leasekeeper to give up")
    finally:
        for consumer in usurpers:
            with contextlib.suppress(RuntimeError):  # closed already after it was fenced
                consumer.close()
    assert lk.process.returncode == 1
    log = lk.log.read_text()
    assert log.count("rejoining the group as a new consumer") == REJOINS
    assert "same --instance-id" in log
    assert "Traceback" not in log
