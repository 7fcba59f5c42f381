"""Pure parts of the first-hour fixes: durations, where the Kafka address comes from,
per-queue sockets, deduplicated client logs, defaults defined once."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from jobcore.cli_kafka import unreachable_message
from jobcore.client_log import RepeatFilter
from jobcore.config import (
    BootstrapOrigin,
    Environment,
    default_leasekeeper_target,
    recorded_dev_bootstrap,
)
from jobcore.durations import DURATION, parse_duration, shown
from jobcore.kafka import KafkaSettings
from leasekeeper.core.retry_budget import RetryBudget
from leasekeeper.dlq.cli import dlq
from leasekeeper.ops.service import ServeConfig
from producer import JobProducer, JobRequest, PayloadError
from producer import cli as producer_cli
from producer.api import as_request


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("2.5", 2.5), ("250ms", 0.25), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0)],
)
def test_every_duration_option_reads_the_same_forms(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)
    assert DURATION.convert(text, None, None) == seconds


def test_a_bad_duration_names_the_forms_that_work() -> None:
    with pytest.raises(click.BadParameter, match=r"invalid duration 'soon'.*10m"):
        DURATION.convert("soon", None, None)


def _env(**changes: object) -> Environment:
    base = Environment(
        bootstrap="127.0.0.1:9092",
        leasekeeper_target="unix:default.sock",
        leasekeeper_token=None,
        topic_prefix="jobs",
        schema_path=(),
    )
    return Environment(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def test_the_bootstrap_says_where_it_came_from(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("bootstrap.servers=file:1\n")
    assert _env().kafka("c").origin == BootstrapOrigin.DEFAULT
    assert _env(dev_bootstrap="dev:1").kafka("c").bootstrap == "dev:1"
    assert _env(dev_bootstrap="dev:1").kafka("c").origin == BootstrapOrigin.DEV_KAFKA
    from_file = _env(dev_bootstrap="dev:1").kafka("c", kafka_config=config)
    assert (from_file.bootstrap, from_file.origin) == ("file:1", BootstrapOrigin.CONFIG_FILE)
    from_env = _env(bootstrap="env:1", bootstrap_from_env=True).kafka("c", kafka_config=config)
    assert (from_env.bootstrap, from_env.origin) == ("env:1", BootstrapOrigin.ENV)
    flag = _env(bootstrap="env:1", bootstrap_from_env=True).kafka("c", bootstrap="flag:1")
    assert (flag.bootstrap, flag.origin) == ("flag:1", BootstrapOrigin.FLAG)


def test_the_unreachable_message_names_address_origin_and_fix() -> None:
    settings = KafkaSettings(bootstrap="127.0.0.1:9092", origin=BootstrapOrigin.DEFAULT.value)
    assert unreachable_message(settings) == (
        "cannot reach Kafka at 127.0.0.1:9092 (default; set KAFKA_BOOTSTRAP or --bootstrap; "
        "is it running? leasekeeper dev kafka status)"
    )


def test_a_recorded_local_kafka_counts_only_while_its_processes_run(tmp_path: Path) -> None:
    environ = {"LOCAL_KAFKA_DIR": str(tmp_path)}
    assert recorded_dev_bootstrap(environ) is None
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"bootstrap": "127.0.0.1:4242", "pids": [os.getpid()]}))
    assert recorded_dev_bootstrap(environ) == "127.0.0.1:4242"
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)  # fmt: skip
    state.write_text(json.dumps({"bootstrap": "127.0.0.1:4242", "pids": [int(finished.stdout)]}))
    assert recorded_dev_bootstrap(environ) is None
    state.write_text("not json")
    assert recorded_dev_bootstrap(environ) is None


def test_the_default_socket_is_per_queue(tmp_path: Path) -> None:
    environ = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert default_leasekeeper_target(environ, queue="emails") == (
        f"unix:{tmp_path}/kafka-lease-queue/emails.sock"
    )


def test_the_target_is_the_flag_then_the_environment_then_the_queue_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    env = _env()
    assert env.target("unix:flag.sock", queue="emails") == "unix:flag.sock"
    assert env.target(None, queue="emails").endswith("/emails.sock")
    assert env.target(None).endswith("/kafka-lease-queue/leasekeeper.sock")
    pinned = _env(leasekeeper_target="unix:env.sock", leasekeeper_target_from_env=True)
    assert pinned.target(None, queue="emails") == "unix:env.sock"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("librdkafka", logging.ERROR, __file__, 1, message, None, None)


def test_a_repeated_client_line_passes_once_per_window() -> None:
    clock = _Clock()
    repeats = RepeatFilter(window_s=30, clock=clock)
    assert repeats.filter(_record("Connect to 127.0.0.1:9092 failed (after 0ms)"))
    assert not repeats.filter(_record("Connect to 127.0.0.1:9092 failed (after 12ms)"))
    assert repeats.filter(_record("another problem"))
    clock.now = 31
    assert repeats.filter(_record("Connect to 127.0.0.1:9092 failed (after 3ms)"))


def test_client_settings_send_librdkafka_logs_to_python_logging() -> None:
    logger = KafkaSettings(bootstrap="x:1").base()["logger"]
    assert isinstance(logger, logging.Logger)
    assert logger.name == "librdkafka"


def test_the_retry_budget_floor_is_defined_once() -> None:
    config = ServeConfig(
        queue="q", kafka=KafkaSettings(bootstrap="x:1"), state_dir=Path(), listen="unix:x"
    )
    budget = RetryBudget()
    assert budget.allowed() == config.retry_budget_floor
    serve = pytest.importorskip("leasekeeper.ops.cli").serve
    floor = next(p for p in serve.params if p.name == "retry_budget_floor")
    assert floor.default == config.retry_budget_floor


@pytest.mark.parametrize(
    ("given", "meant"),
    [("permanent", "permanent error"), ("Attempts-Exhausted", "attempts exhausted")],
)
def test_a_dlq_reason_may_be_a_unique_prefix(given: str, meant: str) -> None:
    command = dlq.commands["list"]
    reason = next(p for p in command.params if p.name == "reason")
    ctx = click.Context(command)
    assert reason.process_value(ctx, given) == meant


def test_an_unknown_dlq_reason_is_refused_before_kafka() -> None:
    result = CliRunner().invoke(dlq, ["list", "--queue", "q", "--reason", "permanant"])
    assert result.exit_code == 2
    assert "'permanant' is not a dead-letter reason" in result.output


def test_job_producer_reads_jobs_schema_path_as_the_clis_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fh_invoice.avsc").write_text(
        json.dumps(
            {"type": "record", "name": "fh_invoice", "fields": [{"name": "n", "type": "long"}]}
        )
    )
    monkeypatch.setenv("JOBS_SCHEMA_PATH", str(tmp_path))
    with (
        JobProducer(KafkaSettings(bootstrap="127.0.0.1:1")) as producer,
        pytest.raises(PayloadError) as caught,
    ):
        producer.enqueue("q", "fh_invoice", {"n": "not a number"}, tenant_id="t")
    assert "no schema" not in str(caught.value)
    assert "'n'" in str(caught.value)


@pytest.mark.parametrize(
    "args",
    [
        ["create-queue", "--queue", "q", "--partitions", "1", "--connect-timeout", "0.1s"],
        ["create-queue", "q", "--partitions", "1", "--connect-timeout", "0.1s"],
        ["cancel", "--queue", "q", "job-1", "--connect-timeout", "0.1s"],
        ["cancel", "q", "job-1", "--connect-timeout", "0.1s"],
    ],
)
def test_the_queue_is_taken_as_queue_or_as_the_first_argument(args: list[str]) -> None:
    """Both spellings get as far as Kafka (none here: exit 3), and name the same queue."""
    result = CliRunner().invoke(
        producer_cli.main, [*args, "--bootstrap", "127.0.0.1:1"], env={"KAFKA_BOOTSTRAP": ""}
    )
    assert result.exit_code == 3, result.output
    assert "cannot reach Kafka at 127.0.0.1:1 (--bootstrap;" in result.output


def test_a_missing_queue_argument_shows_both_spellings() -> None:
    result = CliRunner().invoke(producer_cli.main, ["cancel", "job-1"])
    assert result.exit_code == 2
    assert "expected QUEUE JOB_ID or --queue QUEUE JOB_ID, got job-1" in result.output


def test_enqueue_takes_a_job_request_whole() -> None:
    request = JobRequest(queue="q", type="send_receipt", payload={"order_id": "x"}, tenant_id="t")
    with JobProducer(KafkaSettings(bootstrap="127.0.0.1:1")) as producer:
        with pytest.raises(PayloadError, match="order_id"):
            producer.enqueue(request)  # validated first: nothing reaches Kafka
        with pytest.raises(TypeError, match="JobRequest alone"):
            producer.enqueue(request, "send_receipt", {})  # type: ignore[call-overload]
    assert as_request("q", "noop", {}, {"tenant_id": "t", "priority": "bulk"}) == JobRequest(
        queue="q", type="noop", payload={}, tenant_id="t", priority="bulk"
    )


def test_dev_kafka_records_its_address_where_the_commands_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devtools import dev_cluster

    monkeypatch.delenv("LOCAL_KAFKA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    default = tmp_path / "kafka-lease-queue" / "dev-cluster"
    assert dev_cluster.state_file() == default / "state.json"
    explicit = tmp_path / "cluster"  # --state-dir, or LOCAL_KAFKA_DIR read by click
    assert dev_cluster.state_file(explicit) == explicit / "state.json"
    monkeypatch.setenv("LOCAL_KAFKA_DIR", str(explicit))
    assert dev_cluster.state_file() == explicit / "state.json"
    explicit.mkdir()
    dev_cluster.ClusterRecord(bootstrap="127.0.0.1:4242", pids=(os.getpid(),)).write(
        dev_cluster.state_file()
    )
    assert recorded_dev_bootstrap() == "127.0.0.1:4242"
    # Stopped: the record keeps the address for the next start, but no command uses it.
    dev_cluster.ClusterRecord(bootstrap="127.0.0.1:4242", pids=()).write(explicit / "state.json")
    assert recorded_dev_bootstrap() is None


@pytest.mark.parametrize("seconds", [0.25, 1.0, 10.0, 30.0, 90.0, 600.0, 3600.0, 86400.0])
def test_a_default_shown_in_help_reads_back_as_the_same_duration(seconds: float) -> None:
    assert DURATION.convert(shown(seconds), None, None) == seconds


def test_with_no_queue_the_only_running_leasekeeper_is_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    directory = tmp_path / "kafka-lease-queue"
    directory.mkdir()
    env = _env()
    assert env.target(None) == f"unix:{directory / 'leasekeeper.sock'}"
    with socket.socket(socket.AF_UNIX) as emails:
        emails.bind(str(directory / "emails.sock"))
        assert env.target(None) == f"unix:{directory / 'emails.sock'}"
        with socket.socket(socket.AF_UNIX) as reports:
            reports.bind(str(directory / "reports.sock"))
            assert env.target(None) == f"unix:{directory / 'leasekeeper.sock'}"
            assert env.target(None, queue="reports") == f"unix:{directory / 'reports.sock'}"
