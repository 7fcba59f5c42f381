"""The local cluster manager: a failover cluster, chaos kill/restart, and clear start errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.localkafka import KafkaUnavailable, LocalKafka, obtain
from jobcore.kafka import (
    KafkaSettings,
    Message,
    TopicSpec,
    create_topics,
    make_producer,
    wait_for_brokers,
)


@pytest.mark.slow
def test_three_broker_cluster_survives_killing_one_broker(tmp_path: Path) -> None:
    cluster = LocalKafka(distribution=obtain(), workdir=tmp_path, brokers=3, heap="384m")
    try:
        cluster.start()
        settings = KafkaSettings(bootstrap=cluster.bootstrap)
        create_topics(settings, [TopicSpec(name="failover", partitions=3, replication=3)])

        cluster.kill_broker(0)
        assert not cluster.nodes[0].alive()

        # acks=all with min.insync.replicas=2: two live replicas still accept writes.
        producer = make_producer(settings, **{"message.timeout.ms": 60000})
        errors: list[object] = []

        def delivered(err: object, msg: Message) -> None:
            if err is not None:
                errors.append(err)

        for i in range(100):
            producer.produce("failover", key=str(i).encode(), value=b"x", on_delivery=delivered)
        assert producer.flush(60) == 0
        assert errors == []

        cluster.restart_broker(0)
        assert cluster.nodes[0].alive()
        assert wait_for_brokers(cluster.bootstrap, 3, timeout=10)
    finally:
        cluster.stop()
    assert not any(node.alive() for node in cluster.nodes)


def test_a_broker_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    cluster = LocalKafka(distribution=obtain(), workdir=tmp_path, brokers=1, heap="1k")
    with pytest.raises(KafkaUnavailable) as raised:
        cluster.start(timeout=30)
    cluster.stop(grace=1)
    message = str(raised.value)
    assert "broker process exited" in message
    assert "heap" in message.lower()


def test_a_cluster_id_that_starts_with_a_dash_formats_and_starts(tmp_path: Path) -> None:
    # About one random id in 64 starts with "-"; the storage tool once read it as a flag.
    cluster = LocalKafka(
        distribution=obtain(), workdir=tmp_path, brokers=1, cluster_id="-" + "A" * 21
    )
    try:
        cluster.start()
        assert wait_for_brokers(cluster.bootstrap, 1, timeout=10)
    finally:
        cluster.stop()


def test_generated_cluster_ids_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid

    from devtools.localkafka import cluster as cluster_module

    # uuid bytes 0xf8... encode to "-" first in URL-safe base64; then a normal one.
    ids = iter([uuid.UUID(bytes=b"\xf8" + b"\x00" * 15), uuid.UUID(int=1 << 100)])
    monkeypatch.setattr(cluster_module.uuid, "uuid4", lambda: next(ids))
    generated = cluster_module._random_cluster_id()
    assert not generated.startswith("-")
    assert len(generated) == 22
