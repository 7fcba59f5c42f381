"""The broker settings a local cluster writes: what failover and group tests rely on."""

from __future__ import annotations

from pathlib import Path

from devtools.localkafka import LocalKafka
from devtools.localkafka.cluster import BrokerNode
from devtools.localkafka.distribution import KafkaDistribution


def properties(cluster: LocalKafka, tmp_path: Path, brokers: int) -> dict[str, str]:
    cluster.nodes = [
        BrokerNode(node_id=i + 1, port=9000 + i, controller_port=9100 + i, directory=tmp_path)
        for i in range(brokers)
    ]
    text = cluster._properties(cluster.nodes[0])
    return dict(line.split("=", 1) for line in text.splitlines())


def cluster_of(brokers: int, tmp_path: Path, **options: int) -> LocalKafka:
    distribution = KafkaDistribution(version="0", libs=tmp_path, java="java", source="test")
    return LocalKafka(distribution=distribution, workdir=tmp_path, brokers=brokers, **options)


def test_three_brokers_replicate_three_times_and_accept_writes_with_one_down(
    tmp_path: Path,
) -> None:
    settings = properties(cluster_of(3, tmp_path), tmp_path, 3)
    assert settings["default.replication.factor"] == "3"
    assert settings["min.insync.replicas"] == "2"
    assert settings["offsets.topic.replication.factor"] == "3"


def test_groups_rebalance_at_once_unless_asked_to_wait_for_members(tmp_path: Path) -> None:
    assert (
        properties(cluster_of(1, tmp_path), tmp_path, 1)["group.initial.rebalance.delay.ms"] == "0"
    )
    waiting = cluster_of(3, tmp_path, initial_rebalance_delay_ms=3000)
    assert properties(waiting, tmp_path, 3)["group.initial.rebalance.delay.ms"] == "3000"
