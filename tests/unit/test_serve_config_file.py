"""``leasekeeper serve --config FILE``: options from a TOML file, flags win, and a
file with a mistake is refused with one line naming it (never half applied)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner, Result

from leasekeeper.breaker.settings import BreakerRule
from leasekeeper.ops import cli, serve_cli
from leasekeeper.ops.service import ServeConfig
from tests.unit.test_leasekeeper_exit import _FailedService


class _Captured(_FailedService):
    """Stands in for the service: keeps the config ``serve`` built and stops at once."""

    seen: ClassVar[list[ServeConfig]] = []
    failure = None

    def __init__(self, config: ServeConfig) -> None:
        super().__init__(config)
        self.seen.append(config)


@pytest.fixture
def serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[ServeConfig]:
    seen: list[ServeConfig] = []
    monkeypatch.setattr(_Captured, "seen", seen)
    monkeypatch.setattr(serve_cli, "LeaseKeeperService", _Captured)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    return seen


def _run(tmp_path: Path, toml: str, *args: str) -> Result:
    path = tmp_path / "serve.toml"
    path.write_text(toml)
    args = ("serve", "--config", str(path), "--bootstrap", "x:1", *args)
    return CliRunner().invoke(cli.main, list(args))


def test_options_come_from_the_file_and_flags_win(serve: list[ServeConfig], tmp_path: Path) -> None:
    toml = f"""
queue = "emails"
state-dir = "{tmp_path / "state"}"
window_records = 1234
window-bytes = 4096
lease = "2m"
breaker = ["send_receipt=50%/20/30s"]
rate-limit = "resize=10/s"
no-status = true
"""
    result = _run(tmp_path, toml, "--window-records", "99")
    assert result.exit_code == 0, result.output
    (config,) = serve
    assert config.queue == "emails" and config.state_dir == tmp_path / "state"
    assert config.engine.window_records == 99, "the flag wins over the file"
    assert config.engine.window_bytes == 4096
    assert config.engine.lease_s == 120.0
    assert config.engine.status_records is False
    rule = BreakerRule(rate=0.5, min_calls=20, window_s=30.0)
    assert config.engine.breakers.by_type == {"send_receipt": rule}
    assert config.engine.rate_limits.by_type["resize"].per_s == 10.0


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ('queue = "q"\nwindow-recods = 3\n', "window-recods (did you mean window-records?)"),
        ('queue = "q"\n[breakers]\nx = 1\n', "no such option of serve: breakers"),
        ('queue = "q"\nlease = [1, 2]\n', "lease takes one value, not a list"),
        ("queue = \n", "cannot read"),
        ('queue = "q"\nwindow-records = "many"\n', "'many' is not a valid integer"),
        ('queue = "q"\nwindow-records = 1.5\n', "'1.5' is not a valid integer"),
        ('queue = "q"\nwindow-records = [1]\n', "window-records takes one value, not a list"),
        ('queue = "q"\nwindow-records = true\n', "True is not a value of --window-records"),
        ('queue = "q"\nno-status = "yes"\n', "no-status takes true or false"),
    ],
)
def test_a_file_with_a_mistake_is_refused_naming_it(
    serve: list[ServeConfig], tmp_path: Path, toml: str, said: str
) -> None:
    result = _run(tmp_path, toml, "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 2
    assert said in result.output
    assert "Traceback" not in result.output
    assert serve == [], "nothing started on a bad file"


def test_a_missing_file_is_refused(serve: list[ServeConfig], tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli.main, ["serve", "--config", str(tmp_path / "none.toml"), "--queue", "q"]
    )
    assert result.exit_code == 2
    assert "none.toml" in result.output and "does not exist" in result.output
    assert serve == []


def test_a_relative_path_is_read_from_the_files_folder(
    serve: list[ServeConfig], tmp_path: Path
) -> None:
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "serve.toml"
    path.write_text('queue = "q"\nstate-dir = "../state"\n')
    result = CliRunner().invoke(cli.main, ["serve", "--config", str(path), "--bootstrap", "x:1"])
    assert result.exit_code == 0, result.output
    (config,) = serve
    assert config.state_dir.resolve() == (tmp_path / "state").resolve()
