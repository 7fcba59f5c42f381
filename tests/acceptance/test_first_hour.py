"""The first hour's mistakes, run as a new user runs them: as processes, from a fresh
terminal. Each ends in one line naming the problem, its documented exit code, no
traceback and no raw librdkafka (``%3|...``) line.

Kafka is "down" here by pointing at a port nobody listens on; the outer
``timeout`` is only a guard against a hang, never an assertion about speed.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobcore.cli_errors import ExitCode
from jobcore.kafka import KafkaSettings

BIN = Path(sys.executable).parent
RAW_CLIENT_LOG = re.compile(r"^%\d\|", re.MULTILINE)
GUARD_S = 120
RECEIPT = '{"order_id": 42, "email": "a@example.com", "amount_cents": 1999}'


@dataclass(frozen=True, kw_only=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def first_line(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[0] if lines else ""

    def assert_one_line_error(self, code: int, starts: str) -> None:
        """The contract of every expected mistake."""
        assert self.code == code, self.stderr
        assert "Traceback" not in self.stderr, self.stderr
        assert not RAW_CLIENT_LOG.search(self.stderr), self.stderr
        assert self.first_line.startswith(starts), self.stderr


@pytest.fixture
def fresh_env(tmp_path: Path) -> dict[str, str]:
    """A new terminal: no KAFKA_BOOTSTRAP, no LEASEKEEPER_TARGET, no local Kafka recorded,
    a private runtime directory for the default sockets."""
    dropped = ("KAFKA_BOOTSTRAP", "KAFKA_CONFIG", "LEASEKEEPER_TARGET", "LOG_LEVEL")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    env["LOCAL_KAFKA_DIR"] = str(tmp_path / "no-local-kafka")
    return env


@pytest.fixture
def dead_address() -> Iterator[str]:
    """An address where nothing accepts connections: a port bound but not listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def run(command: str, *args: str, env: dict[str, str]) -> Outcome:
    result = subprocess.run(
        [str(BIN / command), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
        check=False,
    )
    return Outcome(code=result.returncode, stdout=result.stdout, stderr=result.stderr)


ONE_SHOT_KAFKA_COMMANDS = [
    ("producer", "create-queue", "emails", "--partitions", "1"),
    ("producer", "enqueue", "emails", "send_receipt", "--tenant", "acme", "--payload", RECEIPT),
    ("producer", "cancel", "emails", "some-job-id"),
    ("leasekeeper", "dlq", "list", "--queue", "emails"),
]


@pytest.mark.parametrize("command", ONE_SHOT_KAFKA_COMMANDS, ids=lambda c: " ".join(c[:3]))
def test_a_one_shot_command_without_kafka_names_the_address_and_where_it_came_from(
    command: tuple[str, ...], fresh_env: dict[str, str], dead_address: str
) -> None:
    env = {**fresh_env, "KAFKA_BOOTSTRAP": dead_address}
    outcome = run(*command, "--connect-timeout", "2s", env=env)
    outcome.assert_one_line_error(
        ExitCode.UNREACHABLE, f"Error: cannot reach Kafka at {dead_address} (KAFKA_BOOTSTRAP;"
    )
    assert "leasekeeper dev kafka status" in outcome.first_line


def test_the_default_address_is_named_as_the_default(
    fresh_env: dict[str, str], dead_address: str
) -> None:
    outcome = run(
        "producer", "create-queue", "emails", "--partitions", "1",
        "--bootstrap", dead_address, "--connect-timeout", "2s", env=fresh_env,
    )  # fmt: skip
    outcome.assert_one_line_error(
        ExitCode.UNREACHABLE, f"Error: cannot reach Kafka at {dead_address} (--bootstrap;"
    )


def test_a_second_terminal_uses_the_address_dev_kafka_start_recorded(
    fresh_env: dict[str, str], dead_address: str, tmp_path: Path
) -> None:
    state = Path(fresh_env["LOCAL_KAFKA_DIR"])
    state.mkdir()
    # Any live process stands in for the broker: the pids are how a stale file is told.
    (state / "state.json").write_text(
        json.dumps({"bootstrap": dead_address, "pids": [os.getpid()]})
    )
    outcome = run(
        "producer", "cancel", "emails", "some-job-id", "--connect-timeout", "2s", env=fresh_env
    )
    outcome.assert_one_line_error(
        ExitCode.UNREACHABLE,
        f"Error: cannot reach Kafka at {dead_address} (recorded by `leasekeeper dev kafka start`",
    )


def test_debug_shows_the_traceback(fresh_env: dict[str, str], dead_address: str) -> None:
    env = {**fresh_env, "KAFKA_BOOTSTRAP": dead_address}
    outcome = run(
        "producer", "--debug", "cancel", "emails", "x", "--connect-timeout", "1s", env=env
    )
    assert outcome.code == ExitCode.UNREACHABLE
    assert "Traceback" in outcome.stderr
    env_debug = {**env, "LOG_LEVEL": "debug"}
    outcome = run("producer", "cancel", "emails", "x", "--connect-timeout", "1s", env=env_debug)
    assert "Traceback" in outcome.stderr


def test_inspect_with_no_leasekeeper_names_the_socket_of_the_queue(
    fresh_env: dict[str, str],
) -> None:
    outcome = run("leasekeeper", "inspect", "--queue", "emails", env=fresh_env)
    socket_path = Path(fresh_env["XDG_RUNTIME_DIR"]) / "kafka-lease-queue" / "emails.sock"
    outcome.assert_one_line_error(
        ExitCode.UNREACHABLE, f"Error: no leasekeeper answers at unix:{socket_path}"
    )
    assert "leasekeeper serve --queue emails" in outcome.first_line


def test_inspect_job_with_no_leasekeeper_is_one_line(fresh_env: dict[str, str]) -> None:
    outcome = run("leasekeeper", "inspect", "job", "abc", "--queue", "emails", env=fresh_env)
    outcome.assert_one_line_error(ExitCode.UNREACHABLE, "Error: no leasekeeper answers at unix:")


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (("leasekeeper", "serve", "--queue", "emails", "--state-dir", "s", "--log-level"), "bogus"),
        (("workers", "run", "receipts:app", "--log-level"), "bogus"),
        (("producer", "cron", "run", "--log-level"), "bogus"),
        (("leasekeeper", "dlq", "list", "--queue", "emails", "--reason"), "bogus"),
        (("leasekeeper", "serve", "--queue", "emails", "--state-dir", "s", "--lease"), "soon"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]) + " " + v[-1],
)
def test_a_bad_flag_value_names_the_flag_first(
    command: tuple[str, ...], flag: str, fresh_env: dict[str, str]
) -> None:
    outcome = run(*command, flag, env=fresh_env)
    outcome.assert_one_line_error(ExitCode.SETUP, f"Error: Invalid value for '{command[-1]}'")


def test_log_level_is_case_insensitive_everywhere(fresh_env: dict[str, str]) -> None:
    """Upper and lower case both pass parsing on every command; each then stops at a
    later mistake given on purpose (a module that does not exist, a bad socket mode),
    which shows the level itself was accepted."""
    for level in ("WARNING", "warning", "Info"):
        worker = run("workers", "run", "no_such_module:app", "--log-level", level, env=fresh_env)
        assert "no_such_module" in worker.first_line, worker.stderr
        serve = run(
            "leasekeeper", "serve", "--queue", "emails", "--state-dir", "s",
            "--log-level", level, "--socket-mode", "bogus", env=fresh_env,
        )  # fmt: skip
        serve.assert_one_line_error(ExitCode.SETUP, "Error: Invalid value for --socket-mode")


def test_serve_on_a_missing_queue_is_one_line(
    kafka: KafkaSettings, unique: str, fresh_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**fresh_env, "KAFKA_BOOTSTRAP": kafka.bootstrap}
    outcome = run(
        "leasekeeper", "serve", "--queue", f"never{unique}",
        "--state-dir", str(tmp_path / "state"), env=env,
    )  # fmt: skip
    assert outcome.code == ExitCode.SETUP, outcome.stderr
    assert "Traceback" not in outcome.stderr
    assert not RAW_CLIENT_LOG.search(outcome.stderr), outcome.stderr
    last = outcome.stderr.strip().splitlines()[-1]
    assert last == (
        f"Error: queue topic jobs.never{unique} does not exist: run "
        f"`producer create-queue never{unique} --partitions N` first"
    )


def test_cron_list_refuses_a_payload_cron_run_refuses(
    fresh_env: dict[str, str], dead_address: str, tmp_path: Path
) -> None:
    config = tmp_path / "cron.toml"
    config.write_text(
        '[[cron]]\nname = "receipts"\nschedule = "0 * * * *"\nqueue = "emails"\n'
        'type = "send_receipt"\ntenant = "acme"\npayload = { order_id = "not a number" }\n'
    )
    env = {**fresh_env, "KAFKA_BOOTSTRAP": dead_address}
    outcome = run("producer", "cron", "list", "--config", str(config), env=env)
    outcome.assert_one_line_error(ExitCode.FAILURE, f"Error: {config}: ")
    assert "receipts" in outcome.first_line
    assert "payload" in outcome.first_line


def test_a_worker_app_without_handlers_is_refused(
    fresh_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "empty_app.py").write_text('from workers import App\n\napp = App("empty")\n')
    env = {**fresh_env, "PYTHONPATH": str(tmp_path)}
    outcome = run("workers", "run", "empty_app:app", "--queue", "emails", env=env)
    outcome.assert_one_line_error(ExitCode.FAILURE, "Error: app 'empty' (empty_app:app) has no")
