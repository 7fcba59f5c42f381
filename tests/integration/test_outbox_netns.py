"""A relay whose network goes silent loses the lock to a standby within the lock
timeout: the active relay runs in a network namespace of the test's own and reaches
PostgreSQL through a veth pair and a forwarder; the test cuts the link.

The namespaced relay only holds the lock (its Kafka address leads nowhere, and no
row is staged while it leads), so what this shows is the take-over and that the
standby sends each job once. Needs root (``ip netns``): skipped with the reason
otherwise, and a failure under ``CI``."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from benchmarks.peers.servers import PostgresServer
from jobcore.kafka import KafkaSettings
from jobcore.topics import QueueTopics
from producer import ensure_queue_topics
from producer.outbox import Outbox, init_schema
from tests.integration.test_outbox import PARTITIONS, job_ids_in, receipt, wait_for, waiting
from tests.integration.test_outbox_session import (
    LOCK_TIMEOUT_S,
    POLL_S,
    TAKE_OVER_DEADLINE_S,
    standby_thread,
)


class Forwarder:
    """Accepts on ``listen`` and copies bytes both ways to ``target``, a thread per
    direction; a connection whose far side goes silent just stays open."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self._target = target
        self._server = socket.create_server(listen)
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._target)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_copy, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._server.close()
        for sock in self._sockets:
            sock.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        sink.close()


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def namespace(unique: str) -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair: (namespace, the root
    side's device, the root side's address). Removed afterwards."""
    name, tag = f"olr{unique[:8]}", unique[:6]
    host_dev, ns_dev = f"vr{tag}", f"vn{tag}"
    # A /30 in a private range used only between this machine's namespaces.
    subnet = random.randrange(0, 64) * 4
    third = random.randrange(256)
    host_ip, ns_ip = f"10.200.{third}.{subnet + 1}", f"10.200.{third}.{subnet + 2}"
    try:
        if shutil.which("ip") is None:
            raise OSError("the ip command is missing (iproute2)")
        ip("netns", "add", name)
    except (OSError, subprocess.CalledProcessError) as exc:
        reason = getattr(exc, "stderr", None) or exc
        if os.environ.get("CI"):
            pytest.fail(f"cannot create a network namespace in CI: {reason}", pytrace=False)
        pytest.skip(f"cannot create a network namespace (needs root and iproute2): {reason}")
    try:
        ip("link", "add", host_dev, "type", "veth", "peer", "name", ns_dev, "netns", name)
        ip("addr", "add", f"{host_ip}/30", "dev", host_dev)
        ip("link", "set", host_dev, "up")
        ip("-n", name, "addr", "add", f"{ns_ip}/30", "dev", ns_dev)
        ip("-n", name, "link", "set", ns_dev, "up")
        ip("-n", name, "link", "set", "lo", "up")
        yield name, host_dev, host_ip
    finally:
        subprocess.run(["ip", "link", "del", host_dev], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_a_relay_whose_network_goes_silent_loses_the_lock_to_a_standby(
    pg_dsn: str,
    postgres: PostgresServer,
    kafka: KafkaSettings,
    unique: str,
    namespace: tuple[str, str, str],
    tmp_path: Path,
) -> None:
    name, host_dev, host_ip = namespace
    init_schema(pg_dsn)
    queue = f"q{unique}"
    ensure_queue_topics(kafka, queue, partitions=PARTITIONS)
    forwarder = Forwarder((host_ip, 0), ("127.0.0.1", postgres.port))
    dbname = pg_dsn.split("dbname=")[1]
    remote_dsn = f"host={host_ip} port={forwarder.port} user=postgres dbname={dbname}"
    log = tmp_path / "relay.log"
    cmd = [
        "ip", "netns", "exec", name, str(Path(sys.executable).with_name("producer")),
        "outbox", "relay", "--bootstrap", f"{host_ip}:9", "--poll-interval", f"{POLL_S}",
        "--lock-timeout", f"{LOCK_TIMEOUT_S}", "--publish-interval", "1h",
    ]  # fmt: skip
    with log.open("wb") as out:
        cut_off = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OUTBOX_DSN": remote_dsn}
        )
    staged: list[str] = []
    try:
        wait_for(lambda: b"relay: active" in log.read_bytes(), "the namespaced relay to lead")
        with standby_thread(pg_dsn, kafka) as standby:
            ip("link", "set", host_dev, "down")  # the network goes silent
            with psycopg.connect(pg_dsn) as conn:
                staged += Outbox().stage_many(conn, [receipt(queue, n) for n in range(20)])
            wait_for(standby.active.is_set, "the standby to take over",
                     timeout=TAKE_OVER_DEADLINE_S)  # fmt: skip
            wait_for(lambda: waiting(pg_dsn) == 0, "the standby to relay")
            # The cut-off relay learns it too (tcp_user_timeout), instead of hanging.
            wait_for(lambda: b"database connection lost" in log.read_bytes(),
                     "the cut-off relay to notice", timeout=TAKE_OVER_DEADLINE_S)  # fmt: skip
    finally:
        cut_off.send_signal(signal.SIGKILL)
        cut_off.wait(30)
        forwarder.close()
    ids = job_ids_in(kafka, QueueTopics(queue=queue).ready, len(staged))
    assert Counter(ids) == Counter(staged), "a job was lost or sent twice"
