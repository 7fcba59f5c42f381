"""The relay's lock session and the outbox's connections: a stopped relay loses the
lock within the lock timeout and steps down without sending anything twice; the DSN
is read from the environment or a file; staging refuses an autocommit connection.
Real PostgreSQL (the suite's private cluster) and Kafka."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from jobcore.kafka import KafkaSettings
from jobcore.topics import QueueTopics
from producer import JobProducer, ensure_queue_topics
from producer.cli import main as producer_cli
from producer.outbox import Outbox, OutboxRelay, RelayConfig, init_schema
from producer.outbox.relay import LOCK_KEY
from tests.integration.test_outbox import PARTITIONS, job_ids_in, receipt, wait_for, waiting

LOCK_TIMEOUT_S = 2.0
POLL_S = 0.2
# The documented take-over bound (lock timeout + poll interval), with room for a
# loaded machine to schedule the processes.
TAKE_OVER_DEADLINE_S = LOCK_TIMEOUT_S + POLL_S + 8.0


@pytest.fixture
def queue(kafka: KafkaSettings, unique: str) -> str:
    name = f"q{unique}"
    ensure_queue_topics(kafka, name, partitions=PARTITIONS)
    return name


@pytest.fixture
def db(pg_dsn: str) -> str:
    init_schema(pg_dsn)
    return pg_dsn


def test_staging_on_an_autocommit_connection_is_refused_and_writes_nothing(db: str) -> None:
    request = receipt("q", 1)
    with psycopg.connect(db, autocommit=True) as conn:
        with pytest.raises(ValueError, match="autocommit connection outside a transaction"):
            Outbox().stage(conn, request)
        assert waiting(db) == 0
        with conn.transaction():  # a transaction block on it is a transaction
            Outbox().stage(conn, request)
    assert waiting(db) == 1


def test_async_staging_on_an_autocommit_connection_is_refused(db: str) -> None:
    async def stage() -> None:
        async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
            await Outbox().stage_async(conn, receipt("q", 1))

    with pytest.raises(ValueError, match="autocommit connection outside a transaction"):
        asyncio.run(stage())
    assert waiting(db) == 0


def test_the_dsn_is_read_from_the_environment_or_a_file(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OUTBOX_DSN", raising=False)
    runner = CliRunner()
    by_env = runner.invoke(producer_cli, ["outbox", "init"], env={"OUTBOX_DSN": db})
    assert by_env.exit_code == 0, by_env.output
    secret = tmp_path / "dsn"
    secret.write_text(db + "\n")
    by_file = runner.invoke(producer_cli, ["outbox", "dead", "list", "--dsn-file", str(secret)])
    assert by_file.exit_code == 0, by_file.output
    assert "no dead outbox rows" in by_file.output
    dead_by_env = runner.invoke(producer_cli, ["outbox", "dead", "drop", "--all"],
                                env={"OUTBOX_DSN": db})  # fmt: skip
    assert dead_by_env.exit_code == 0, dead_by_env.output
    none = runner.invoke(producer_cli, ["outbox", "init"])
    assert none.exit_code == 2
    assert "--dsn-file PATH, set OUTBOX_DSN, or pass --dsn" in none.output
    both = runner.invoke(producer_cli, ["outbox", "init", "--dsn", db, "--dsn-file", str(secret)])
    assert both.exit_code == 2 and "pass one of them" in both.output
    wrong = runner.invoke(producer_cli, ["outbox", "init"], env={"OUTBOX_DSN": db + "_gone"})
    assert wrong.exit_code == 1 and "(from OUTBOX_DSN)" in wrong.output, wrong.output
    secret.write_text(db + "_gone")
    wrong = runner.invoke(producer_cli, ["outbox", "dead", "list", "--dsn-file", str(secret)])
    assert wrong.exit_code == 1 and f"(from --dsn-file {secret})" in wrong.output, wrong.output


def start_relay(dsn: str, kafka: KafkaSettings, log: Path) -> subprocess.Popen[bytes]:
    """``producer outbox relay`` with its DSN in the environment, not on its command line."""
    cmd = [
        str(Path(sys.executable).with_name("producer")), "outbox", "relay",
        "--bootstrap", kafka.bootstrap, "--batch", "25", "--poll-interval", f"{POLL_S}",
        "--lock-timeout", f"{LOCK_TIMEOUT_S}",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OUTBOX_DSN": dsn}
        )


@contextmanager
def standby_thread(dsn: str, kafka: KafkaSettings) -> Iterator[OutboxRelay]:
    stop = threading.Event()
    producer = JobProducer(kafka)
    config = RelayConfig(dsn=dsn, poll_interval_s=POLL_S, lock_timeout_s=LOCK_TIMEOUT_S)
    relay = OutboxRelay(config, producer, kafka)
    thread = threading.Thread(target=relay.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        stop.set()
        thread.join(30)
        producer.close()


def lock_holder(dsn: str) -> int | None:
    """The server pid of the session holding the relay's advisory lock."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            (LOCK_KEY,),
        ).fetchone()
    return None if row is None else int(row[0])


def test_a_stopped_relay_loses_the_lock_and_steps_down_without_sending_twice(
    db: str, kafka: KafkaSettings, queue: str, tmp_path: Path
) -> None:
    outbox, staged = Outbox(), []
    log = tmp_path / "relay.log"
    first = start_relay(db, kafka, log)
    try:
        wait_for(lambda: b"relay: active" in log.read_bytes(), "the first relay to lead")
        assert db not in Path(f"/proc/{first.pid}/cmdline").read_text()
        with psycopg.connect(db) as conn:
            staged += outbox.stage_many(conn, [receipt(queue, n) for n in range(20)])
        wait_for(lambda: waiting(db) == 0, "the first relay to relay")
        held_by = lock_holder(db)
        with standby_thread(db, kafka) as standby:
            first.send_signal(signal.SIGSTOP)
            with psycopg.connect(db) as conn:
                staged += outbox.stage_many(conn, [receipt(queue, n) for n in range(20, 40)])
            wait_for(standby.active.is_set, "the standby to take over",
                     timeout=TAKE_OVER_DEADLINE_S)  # fmt: skip
            assert lock_holder(db) not in (None, held_by)
            wait_for(lambda: waiting(db) == 0, "the standby to relay the jobs staged meanwhile")
            first.send_signal(signal.SIGCONT)
            wait_for(lambda: b"relay: standby" in log.read_bytes(), "the first relay to step down")
            with psycopg.connect(db) as conn:
                staged += outbox.stage_many(conn, [receipt(queue, n) for n in range(40, 60)])
            wait_for(lambda: waiting(db) == 0, "the standby to relay the last jobs")
            assert standby.active.is_set()
    finally:
        first.send_signal(signal.SIGCONT)
        first.send_signal(signal.SIGTERM)
        first.wait(30)
    ids = job_ids_in(kafka, QueueTopics(queue=queue).ready, len(staged))
    assert Counter(ids) == Counter(staged), "a job was lost or sent twice"
