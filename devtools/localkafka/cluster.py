"""Run 1 or N real Kafka brokers (KRaft, combined broker+controller) on loopback.

Used by ``make run``, the test suite and the benchmarks. With N > 1 every node
is a voter, so a 3-node cluster keeps its controller quorum when one node is
killed on purpose by a chaos test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from devtools.localkafka.distribution import KafkaDistribution, KafkaUnavailable
from jobcore.kafka import wait_for_brokers

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class SaslListener:
    """An extra SASL_SSL listener (SASL PLAIN over TLS) beside PLAINTEXT, so security
    settings can be tested against a real broker the way managed Kafka offers them.

    ``keystore_pem`` holds the broker's unencrypted PKCS#8 private key and its
    certificate chain; ``users`` maps user names to passwords."""

    keystore_pem: Path
    users: Mapping[str, str]


@dataclass(kw_only=True)
class BrokerNode:
    """One broker+controller process and the files it owns."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    sasl_port: int | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.directory / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.directory / "stdout.log"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        chunks = []
        for path in (self.log_file, self.stdout_file):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                chunks.append(f"--- {path.name} (node {self.node_id}) ---\n" + "\n".join(text))
        return "\n".join(chunks) or f"(node {self.node_id} wrote no log)"


@dataclass(kw_only=True)
class LocalKafka:
    """A local KRaft cluster whose lifetime the caller owns (start/stop)."""

    distribution: KafkaDistribution
    workdir: Path
    brokers: int = 1
    heap: str = "512m"
    log_level: str = "INFO"
    detach: bool = False
    # How long a new group's first rebalance waits for more members: 0 starts single
    # consumers at once; a few seconds let members started together share the first
    # assignment (a member that joins later gets what a sticky assignor moves to it).
    initial_rebalance_delay_ms: int = 0
    nodes: list[BrokerNode] = field(default_factory=list)
    cluster_id: str = ""
    # Broker settings beyond the defaults below (tests of broker limits).
    overrides: Mapping[str, str] = field(default_factory=dict)
    sasl: SaslListener | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes)

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_SSL listeners' addresses (empty without ``sasl``)."""
        return ",".join(f"127.0.0.1:{n.sasl_port}" for n in self.nodes if n.sasl_port)

    def start(self, timeout: float = 90.0) -> str:
        """Format storage, start every node, and wait until all answer metadata."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self.cluster_id or _random_cluster_id()
        # Nodes given beforehand (a stopped cluster's, read back by ``layout``) keep
        # their ports and data: formatting leaves formatted storage alone.
        self.nodes = self.nodes or [
            BrokerNode(
                node_id=i + 1,
                port=free_port(),
                controller_port=free_port(),
                directory=self.workdir / f"node-{i + 1}",
                sasl_port=free_port() if self.sasl is not None else None,
            )
            for i in range(self.brokers)
        ]
        for node in self.nodes:
            self._format(node)
        for node in self.nodes:
            self._launch(node)
        self.wait_ready(timeout)
        return self.bootstrap

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Block until every node answers a metadata request, or raise with log tails."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n in self.nodes if not n.alive()]
            if dead:
                raise KafkaUnavailable(self._failure("broker process exited", dead))
            if wait_for_brokers(self.bootstrap, len(self.nodes), timeout=2.0):
                return
        raise KafkaUnavailable(self._failure(f"no metadata answer within {timeout:.0f}s"))

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every node, then SIGKILL what is still running after ``grace``."""
        for node in self.nodes:
            if node.alive() and node.process is not None:
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()

    def kill_broker(self, index: int) -> None:
        """SIGKILL one node (chaos tests): no clean shutdown, no flush."""
        node = self.nodes[index]
        if node.process is not None and node.alive():
            node.process.kill()
            node.process.wait()

    def restart_broker(self, index: int, timeout: float = 90.0) -> None:
        """Start a killed node again on its old ports and data, and wait for it."""
        node = self.nodes[index]
        if node.alive():
            raise RuntimeError(f"node {node.node_id} is still running")
        self._launch(node)
        self.wait_ready(timeout)

    def _failure(self, reason: str, nodes: list[BrokerNode] | None = None) -> str:
        tails = "\n".join(n.log_tail() for n in (nodes or self.nodes))
        return f"Kafka did not start ({reason}) at {self.bootstrap}\n{tails}"

    def _properties(self, node: BrokerNode) -> str:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        replication = min(3, len(self.nodes))
        min_isr = 2 if replication >= 3 else 1
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "4",
            "default.replication.factor": str(replication),
            "min.insync.replicas": str(min_isr),
            "offsets.topic.replication.factor": str(replication),
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": str(min_isr),
            "share.coordinator.state.topic.replication.factor": str(replication),
            "share.coordinator.state.topic.min.isr": str(min_isr),
            "group.initial.rebalance.delay.ms": str(self.initial_rebalance_delay_ms),
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "log.retention.hours": "24",
            "log.segment.bytes": str(64 * 1024 * 1024),
            **self.overrides,
        }
        if self.sasl is not None and node.sasl_port is not None:
            lines.update(_sasl_properties(self.sasl, node, lines))
        return "".join(f"{key}={value}\n" for key, value in lines.items())

    def _format(self, node: BrokerNode) -> None:
        node.directory.mkdir(parents=True, exist_ok=True)
        (node.directory / "server.properties").write_text(self._properties(node))
        (node.directory / "log4j2.properties").write_text(
            LOG4J2.format(log=node.log_file, level=self.log_level)
        )
        cmd = [
            self.distribution.java,
            "-Xmx256m",
            "-cp",
            self.distribution.classpath,
            "kafka.tools.StorageTool",
            "format",
            # One argument, so an id that starts with "-" is not read as a flag.
            f"--cluster-id={self.cluster_id}",
            "-c",
            str(node.directory / "server.properties"),
            "--ignore-formatted",
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:  # one more try: a JVM start can fail on a loaded machine
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise KafkaUnavailable(
                f"formatting KRaft storage of node {node.node_id} failed:\n"
                f"{(result.stdout + result.stderr)[-3000:]}"
            )

    def _launch(self, node: BrokerNode) -> None:
        cmd = [
            self.distribution.java,
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:ActiveProcessorCount=2",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.directory}",
            "-cp",
            self.distribution.classpath,
            "kafka.Kafka",
            str(node.directory / "server.properties"),
        ]
        stdout = node.stdout_file.open("ab")
        node.process = subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=self.detach,
            env={**os.environ},
        )
        stdout.close()


def _sasl_properties(
    sasl: SaslListener, node: BrokerNode, lines: Mapping[str, str]
) -> dict[str, str]:
    """Add a SASL_SSL listener (PLAIN, PEM keystore) to a node's PLAINTEXT ones."""
    address = f"SASL_SSL://127.0.0.1:{node.sasl_port}"
    users = " ".join(f'user_{name}="{password}"' for name, password in sasl.users.items())
    prefix = "listener.name.sasl_ssl"
    return {
        "listeners": f"{lines['listeners']},{address}",
        "advertised.listeners": f"{lines['advertised.listeners']},{address}",
        "listener.security.protocol.map": f"{lines['listener.security.protocol.map']},"
        "SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        f"{prefix}.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
        ),
        f"{prefix}.ssl.keystore.type": "PEM",
        f"{prefix}.ssl.keystore.location": str(sasl.keystore_pem),
    }


def _random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding.

    Like Kafka's own ``Uuid.randomUuid``, never one that starts with "-": such an id
    reads as a flag to tools that take it as a separate argument."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
