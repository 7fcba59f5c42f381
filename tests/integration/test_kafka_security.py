"""Every command reaches a SASL_SSL cluster through a ``--kafka-config`` file, and a
wrong password fails fast with one clear line.

The broker gets a SASL_SSL listener (PLAIN over TLS) with a certificate this module
makes; the clients trust it through ``ssl.ca.location`` in the properties file, the
way a managed Kafka's connection file is used."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devtools.localkafka import KafkaUnavailable, LocalKafka, SaslListener, obtain
from jobcore.kafka import KafkaSettings
from jobcore.properties import load_properties
from tests.apps.recording import SCHEMAS
from tests.certs import self_signed
from tests.system import BIN, PARTITIONS, System, wait_until

USER, PASSWORD = "alice", "alice-secret"
GUARD_S = 60  # a wrong credential must fail well within this, not hang


@dataclass(frozen=True, kw_only=True)
class SecureCluster:
    kafka: LocalKafka
    ca: Path


def _certificate(directory: Path) -> tuple[Path, Path]:
    """The broker's keystore (key + chain, PEM) and the CA file clients trust."""
    made = self_signed()
    keystore, ca = directory / "broker-keystore.pem", directory / "ca.pem"
    keystore.write_bytes(made.key_pem + made.cert_pem)
    ca.write_bytes(made.cert_pem)
    return keystore, ca


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    workdir = Path(tmp_path_factory.mktemp("sasl-kafka"))
    keystore, ca = _certificate(workdir)
    cluster = LocalKafka(
        distribution=obtain(),
        workdir=workdir / "cluster",
        heap="384m",
        sasl=SaslListener(keystore_pem=keystore, users={USER: PASSWORD}),
    )
    try:
        cluster.start()
    except KafkaUnavailable as exc:
        cluster.stop(grace=5)
        if os.environ.get("CI"):
            pytest.fail(f"Kafka with a SASL_SSL listener could not start: {exc}", pytrace=False)
        pytest.skip(f"Kafka with a SASL_SSL listener could not start: {exc}")
    try:
        yield SecureCluster(kafka=cluster, ca=ca)
    finally:
        cluster.stop()


def _config_file(path: Path, secure: SecureCluster, password: str) -> Path:
    path.write_text(
        "# what a managed Kafka hands out, in the kcat / Kafka tools format\n"
        f"bootstrap.servers={secure.kafka.sasl_bootstrap}\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanisms: PLAIN\n"
        f"sasl.username={USER}\n"
        f"sasl.password={password}\n"
        f"ssl.ca.location={secure.ca}\n"
    )
    return path


def _env(config: Path) -> dict[str, str]:
    """KAFKA_CONFIG names the file; the file's bootstrap.servers is the only bootstrap."""
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP"}
    return {**env, "KAFKA_CONFIG": str(config)}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=GUARD_S, check=False
    )


def test_create_enqueue_and_serve_over_sasl_ssl_run_a_job(
    secure: SecureCluster, unique: str, tmp_path: Path
) -> None:
    config = _config_file(tmp_path / "client.properties", secure, PASSWORD)
    env = _env(config)
    queue = f"q{unique}"
    create = [str(BIN / "producer"), "create-queue", queue, "--partitions", str(PARTITIONS)]
    created = _run(create, env)
    assert created.returncode == 0, created.stderr
    settings = KafkaSettings(
        bootstrap=secure.kafka.sasl_bootstrap,
        extra={k: v for k, v in load_properties(config).items() if k != "bootstrap.servers"},
    )
    (tmp_path / "system").mkdir()
    system = System(settings, unique, tmp_path / "system")
    try:
        system.leasekeeper.bootstrap = secure.kafka.sasl_bootstrap
        system.leasekeeper.extra_args += ["--kafka-config", str(config)]
        system.leasekeeper.start().wait_assigned(PARTITIONS, timeout=90)
        system.start(workers=1)
        enqueue = [str(BIN / "producer"), "enqueue", queue, "noop", "--tenant", "t1"]
        sent = _run(
            [*enqueue, "--payload", '{"n": 1}', "--schema-path", str(SCHEMAS)],
            env,
        )
        assert sent.returncode == 0, sent.stderr
        job_id = sent.stdout.strip()
        wait_until(lambda: job_id in system.runs(), 60, "the job to run over SASL_SSL")
    finally:
        system.stop()


def test_a_wrong_password_fails_fast_with_one_clear_line(
    secure: SecureCluster, unique: str, tmp_path: Path
) -> None:
    config = _config_file(tmp_path / "client.properties", secure, "not-the-password")
    env = _env(config)
    queue = f"q{unique}"
    created = _run([str(BIN / "producer"), "create-queue", queue, "--partitions", "1"], env)
    _assert_credentials_refused(created)
    assert created.returncode == 2
    sent = _run(
        [str(BIN / "producer"), "enqueue", queue, "noop", "--tenant", "t", "--payload", "{}"], env
    )
    _assert_credentials_refused(sent)
    listed = _run([str(BIN / "leasekeeper"), "dlq", "list", "--queue", queue], env)
    _assert_credentials_refused(listed)
    served = _run(
        [
            str(BIN / "leasekeeper"), "serve", "--queue", queue,
            "--state-dir", str(tmp_path / "state"), "--listen", f"unix:{tmp_path / 'lk.sock'}",
        ],
        env,
    )  # fmt: skip
    _assert_credentials_refused(served)
    assert served.returncode == 2


def _assert_credentials_refused(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert "rejected the credentials" in errors[0] and "sasl.password" in errors[0]
