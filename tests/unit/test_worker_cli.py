"""``workers run``: finding MODULE:APP, options, and the signal-driven shutdown."""

from __future__ import annotations

import os
import signal
import sys
import threading
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.test_worker_support import Envelopes, FakeLeaseKeeper, serving, wait_until
from workers.app import App
from workers.cli import RunOptions, main
from workers.loading import AppNotFound, load_app

APP_SOURCE = """
from workers import App

app = App("cli-test")
not_an_app = 42

class holder:
    app = app

@app.job("noop")
def noop(ctx, payload):
    pass
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A worker module in a fresh current directory, as a user would have it."""
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delenv("LEASEKEEPER_TOKEN", raising=False)
    monkeypatch.delenv("JOBS_SCHEMA_PATH", raising=False)
    return name


def test_load_app_imports_from_the_current_directory(module: str) -> None:
    app = load_app(f"{module}:app")
    assert isinstance(app, App) and app.name == "cli-test"
    assert load_app(f"{module}:holder.app") is app


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{m}", "expected MODULE:APP"),
        ("{m}:", "expected MODULE:APP"),
        ("no_such_module_xyz:app", "cannot find module 'no_such_module_xyz'"),
        ("{m}:missing", "has no attribute 'missing'"),
        ("{m}:not_an_app", "is a int, not a workers.App"),
    ],
)
def test_load_app_explains_what_is_wrong(module: str, spec: str, message: str) -> None:
    with pytest.raises(AppNotFound, match=message):
        load_app(spec.format(m=module))


def test_a_module_that_fails_to_import_names_the_error(tmp_path: Path, module: str) -> None:
    (tmp_path / f"{module}_broken.py").write_text("import not_installed_dependency_xyz\n")
    with pytest.raises(AppNotFound, match="No module named 'not_installed_dependency_xyz'"):
        load_app(f"{module}_broken:app")


def test_run_with_a_bad_app_is_a_usage_error(module: str) -> None:
    result = CliRunner().invoke(main, ["run", f"{module}:nope", "--target", "unix:/nowhere"])
    assert result.exit_code == 2
    assert "Invalid value for MODULE:APP" in result.output
    assert "has no attribute 'nope'" in result.output


def test_child_commands_carry_the_options_and_a_distinct_worker_id() -> None:
    options = RunOptions(
        app_spec="m:app",
        target="unix:/run/lk.sock",
        token="secret",
        concurrency=4,
        prefetch=3,
        processes=2,
        worker_id="pod-1",
        schema_dirs=("schemas-a",),
        grace_s=12.5,
        log_level="INFO",
    )
    command = options.child_command(1, parent_pid=99)
    assert command[:5] == [sys.executable, "-m", "workers", "run", "m:app"]
    joined = " ".join(command[5:])
    for part in (
        "--target unix:/run/lk.sock",
        "--concurrency 4",
        "--prefetch 3",
        "--worker-id pod-1-1",
        "--grace 12.5",
        "--parent-pid 99",
        "--schema-path=schemas-a",
    ):
        assert part in joined
    assert "secret" not in joined, "the token travels in the environment, not argv"


def test_sigterm_drains_and_exits_zero(module: str, tmp_path: Path) -> None:
    fake = FakeLeaseKeeper([Envelopes()()])
    with serving(fake, tmp_path / "lk.sock") as target:
        sent = threading.Thread(target=_sigterm_after_first_ack, args=(fake,))
        sent.start()
        result = CliRunner().invoke(
            main, ["run", f"{module}:app", "--target", target, "--worker-id", "cli-w"]
        )
        sent.join(10)
    assert result.exit_code == 0, result.output
    assert [s.outcome for s in fake.settled] == ["ack"]
    assert fake.worker_ids == {"cli-w"}


def _sigterm_after_first_ack(fake: FakeLeaseKeeper) -> None:
    # The worker installs its handlers before it claims, so the first ack
    # proves SIGTERM will be handled rather than kill the test process.
    wait_until(lambda: len(fake.outcomes("ack")) == 1)
    os.kill(os.getpid(), signal.SIGTERM)
