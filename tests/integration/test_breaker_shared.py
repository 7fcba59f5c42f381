"""Breaker state on ``jobs.Q.breakers``: an operator's ``leasekeeper breaker open|close``
reaches a running leasekeeper, parks the type's jobs, and survives a restart."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from tests.system import BIN, System, wait_until

pytestmark = pytest.mark.kafka


def test_an_operator_holds_a_breaker_open_across_a_restart_then_closes_it(
    system: System,
) -> None:
    # Held open, jobs are parked four cool-downs at a time (plus up to one): 2 s keeps
    # their return after the close within seconds.
    system.configure(lease_s=10, extra=["--retry-tiers", "1s,2s,5s", "--breaker-cooldown", "2s"])
    system.start(workers=1, concurrency=4)
    opened = _breaker_cli(system, "open", "provider maintenance")
    assert opened.returncode == 0, opened.stderr
    assert "held open" in opened.stdout
    wait_until(lambda: _state(system) == "open", 15, "the noop breaker to open")

    ids = set(system.enqueue(20))
    wait_until(lambda: _parked(system) >= 20, 30, "the noop jobs to be parked",
               describe=lambda: _view(system))  # fmt: skip
    assert not set(system.runs()) & ids

    system.leasekeeper.stop()
    system.restart_leasekeeper()
    view = _view(system)
    assert view is not None and view["state"] == "open" and view["forced"], view
    assert "provider maintenance" in view["reason"]

    closed = _breaker_cli(system, "close", "maintenance over")
    assert closed.returncode == 0, closed.stderr
    wait_until(lambda: _state(system) == "closed", 15, "the noop breaker to close")
    wait_until(lambda: set(system.runs()) >= ids, 60, "every parked job to run")
    assert system.dead_letters() == []


def test_a_bad_breaker_rule_exits_with_one_line() -> None:
    done = subprocess.run(
        [str(BIN / "leasekeeper"), "serve", "--queue", "q", "--state-dir", "/nonexistent",
         "--breaker", "send_receipt=50/20/30s"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
    assert errors == [
        "Error: Invalid value for --breaker: invalid breaker rule '50/20/30s': "
        "rate '50' is not a percentage such as 50%"
    ]


def _breaker_cli(system: System, action: str, reason: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "leasekeeper"), "breaker", action, "noop", "--queue", system.queue,
         "--reason", reason, "--bootstrap", system.kafka.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _view(system: System) -> dict[str, Any] | None:
    for view in (system.leasekeeper.snapshot() or {}).get("breakers", []):
        if view["type"] == "noop":
            return dict(view)
    return None


def _state(system: System) -> str | None:
    view = _view(system)
    return None if view is None else str(view["state"])


def _parked(system: System) -> int:
    view = _view(system)
    return 0 if view is None else int(view["parked"])
