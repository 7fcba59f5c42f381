"""``leasekeeper serve`` exits non-zero when its Kafka loop dies, so a supervisor's
``restart: on-failure`` restarts it (it used to exit 0)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from devtools.localkafka import free_port
from jobcore.kafka import KafkaSettings, KafkaSetupError
from leasekeeper.core.state_identity import StateIdentity, StateMismatch
from leasekeeper.ops import cli, serve_cli
from leasekeeper.ops.service import LeaseKeeperService, ServeConfig, ServiceFailure


class _DyingLoop:
    def __init__(self, error: Exception) -> None:
        self.error = error
        self.commits = 0

    def run(self, stop: threading.Event) -> None:
        raise self.error

    def close_if_idle(self) -> None:
        pass


def _service(tmp_path: Path) -> LeaseKeeperService:
    # Nothing listens at the bootstrap: building clients does not connect.
    config = ServeConfig(
        queue="q",
        kafka=KafkaSettings(bootstrap=f"127.0.0.1:{free_port()}"),
        state_dir=tmp_path / "state",
        listen=f"unix:{tmp_path / 'lk.sock'}",
    )
    return LeaseKeeperService(config)


@pytest.mark.parametrize(
    ("error", "code"),
    [(RuntimeError("boom"), 1), (KafkaSetupError("queue topic jobs.q does not exist"), 2)],
)
def test_a_dying_loop_stops_the_service_with_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, code: int
) -> None:
    service = _service(tmp_path)
    real_loop = service.loop
    monkeypatch.setattr(service, "_connect", lambda: None)
    monkeypatch.setattr(service, "loop", _DyingLoop(error))
    service.start()
    try:
        assert service.wait(timeout=10)
    finally:
        service.stop(grace_s=0)
        real_loop.close_if_idle()
    assert service.failure is not None
    assert service.failure.exit_code == code
    assert str(error) in service.failure.message


class _FailedService:
    failure = ServiceFailure(
        message="queue topic jobs.q does not exist: run create-queue", exit_code=2
    )

    def __init__(self, config: ServeConfig) -> None:
        self.config = config

    def start(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def stop(self, grace_s: float = 5.0) -> None:
        pass


@pytest.mark.parametrize("code", [1, 2])
def test_serve_exits_with_the_failure_code_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    failed = type(
        "Failed", (_FailedService,), {"failure": ServiceFailure(message="it broke", exit_code=code)}
    )
    monkeypatch.setattr(serve_cli, "LeaseKeeperService", failed)
    args = ["serve", "--queue", "q", "--state-dir", str(tmp_path), "--bootstrap", "x:1"]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == code
    assert "Error: it broke" in result.output
    assert "Traceback" not in result.output


def test_a_state_dir_of_another_cluster_is_said_once_in_at_most_two_lines_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After the local Kafka was wiped every topic id differs with the cluster's: the
    error listed them all (~900 characters) and was printed twice (log and error)."""
    state_dir = tmp_path / "state"
    recorded = StateIdentity(
        cluster_id="A" * 22, group_id="g", topic_ids={f"jobs.q.t{n}": "x" * 22 for n in range(20)}
    )
    found = StateIdentity(
        cluster_id="B" * 22, group_id="g", topic_ids={f"jobs.q.t{n}": "y" * 22 for n in range(20)}
    )
    mismatch = StateMismatch(state_dir, recorded.differences(found))

    def refused(self: LeaseKeeperService) -> None:
        raise mismatch

    monkeypatch.setattr(LeaseKeeperService, "_connect", refused)
    listen = f"unix:{tmp_path / 'lk.sock'}"
    args = ["serve", "--queue", "q", "--state-dir", str(state_dir),
            "--bootstrap", f"127.0.0.1:{free_port()}", "--listen", listen]  # fmt: skip
    with caplog.at_level(logging.INFO):
        result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2, result.output
    said = result.output + caplog.text
    assert said.count("belongs to another cluster") == 1, said
    lines = result.output[result.output.index("Error: state dir") :].splitlines()
    assert lines[0].startswith(f"Error: state dir {state_dir} belongs to another cluster")
    assert "(cluster id recorded AAAA" in lines[0]
    assert lines[1] == "start with --reset-state to wipe it, or use another --state-dir"
    # Two lines, the first short once the path (any length) is set aside.
    assert len(lines[0]) - len(str(state_dir)) <= 140, lines[0]
