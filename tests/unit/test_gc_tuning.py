"""The collector settings of ``leasekeeper serve`` and ``workers run``: start-up's
objects frozen out of full collections, a larger young generation, cycles still
collected; ``JOBS_GC=default`` keeps Python's settings; library callers untouched.

Each case runs in a fresh interpreter: freezing would change the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jobcore import gc_tuning
from leasekeeper.ops import cli as leasekeeper_cli
from leasekeeper.ops import serve_cli
from tests.unit.test_leasekeeper_exit import _FailedService
from tests.unit.test_worker_cli import (
    _sigterm_after_first_ack,
    module,  # noqa: F401  (a fixture)
)
from tests.unit.test_worker_support import Envelopes, FakeLeaseKeeper, serving
from workers import cli as workers_cli

PROBE = """
import gc, json, os, sys, weakref
from jobcore.gc_tuning import settle_after_startup
before = gc.get_threshold()
setting = settle_after_startup()

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after start-up
gone = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": gc.get_freeze_count(),
                  "tuned": setting.tuned, "cycle_collected": gone() is None}))
"""


def _run(code: str, **env: str) -> Any:
    """What ``code`` prints as JSON, run in a fresh interpreter of this source tree."""
    environ = {k: v for k, v in os.environ.items() if k != gc_tuning.ENV_GC}
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**environ, **env, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def _probe(**env: str) -> dict[str, Any]:
    found: dict[str, Any] = _run(PROBE, **env)
    return found


def test_start_up_objects_are_frozen_and_the_young_threshold_raised() -> None:
    found = _probe()
    assert found["tuned"] is True
    assert tuple(found["after"]) == gc_tuning.THRESHOLDS
    assert found["frozen"] > 1_000  # the modules imported so far
    assert found["cycle_collected"] is True, "cycles made after start-up are still collected"


@pytest.mark.parametrize("value", ["default", " Default "])
def test_jobs_gc_default_keeps_pythons_settings(value: str) -> None:
    found = _probe(JOBS_GC=value)
    assert found["tuned"] is False
    assert found["after"] == found["before"]
    assert found["frozen"] == 0
    assert found["cycle_collected"] is True


def test_importing_the_library_tunes_nothing() -> None:
    code = (
        "import gc, json; import producer, workers, leasekeeper.engine; "
        "print(json.dumps([gc.get_threshold(), gc.get_freeze_count()]))"
    )
    thresholds, frozen = _run(code)
    assert tuple(thresholds) != gc_tuning.THRESHOLDS
    assert frozen == 0


def test_leasekeeper_serve_settles_the_collector_once_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    class Started(_FailedService):
        def start(self) -> None:
            calls.append("start")

    monkeypatch.setattr(serve_cli, "LeaseKeeperService", Started)
    monkeypatch.setattr(gc_tuning, "settle_after_startup", lambda environ=None: calls.append("gc"))
    args = ["serve", "--queue", "q", "--state-dir", str(tmp_path), "--bootstrap", "x:1"]
    CliRunner().invoke(leasekeeper_cli.main, args)
    assert calls == ["start", "gc"]


def test_workers_run_settles_the_collector_before_the_first_claim(
    module: str,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeLeaseKeeper([Envelopes()()])
    settled_at_gc: list[int] = []
    monkeypatch.setattr(
        gc_tuning,
        "settle_after_startup",
        lambda environ=None: settled_at_gc.append(len(fake.settled)),
    )
    with serving(fake, tmp_path / "lk.sock") as target:
        stopper = threading.Thread(target=_sigterm_after_first_ack, args=(fake,))
        stopper.start()
        result = CliRunner().invoke(
            workers_cli.main, ["run", f"{module}:app", "--target", target, "--worker-id", "gc-w"]
        )
        stopper.join(10)
    assert result.exit_code == 0, result.output
    assert settled_at_gc == [0], "tuned once, before any job ran"
