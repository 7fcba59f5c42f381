"""The benchmark harness still runs: scenario 1 in its quick mode on a tiny load.

This keeps ``make bench`` from rotting between the runs that produce
``BENCHMARKS.md``. It checks that a result with the expected shape was
written, never how fast anything was: speed on a shared CI machine is noise.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_quick_drain_writes_a_result_with_every_expected_key(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    command = [
        sys.executable, "-m", "benchmarks",
        "--scenario", "drain", "--quick", "--jobs", "500",
        "--bootstrap", kafka_bootstrap, "--out", str(out),
        "--no-pin", "--no-profile", "--status-cost", "1",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-3000:]

    result = json.loads((out / "drain.json").read_text())
    assert result["scenario"] == "drain"
    assert result["status"] == "ok", result.get("traceback", result["status"])
    assert [row["variant"] for row in result["rows"]] == ["1 worker", "2 workers"]
    for row in result["rows"]:
        assert row["system"] == "ours"
        assert row["jobs"] == 500
        assert {"seconds", "jobs_per_s", "cpu_s_per_1000_jobs", "capped"} <= set(row)
        assert {"leasekeeper", "workers"} <= set(row["cpu_s_per_1000_jobs"])
    assert result["settings"]["jobs"] == 500
    cost = result["status_cost"]  # one pair: with status records, then without
    assert [run["status_records"] for run in cost["runs"]] == ["on", "off"]
    assert {"on", "off"} == set(cost["median_cpu_s_per_1000_jobs"])
    assert "total" in cost["overhead_percent"]
    assert (out / result["chart"]).is_file()

    run = json.loads((out / "run-drain.json").read_text())  # a partial run: its own file
    assert {"machine", "versions", "pinning", "config", "wall_s"} <= set(run)
    assert run["scenarios"] == ["drain"]
    assert "drain" in done.stdout  # the summary printed at the end


@pytest.mark.timeout(240)
def test_codec_both_interleaves_file_and_registry_drains_and_compares_them(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    out = tmp_path / "results"
    command = [
        sys.executable, "-m", "benchmarks",
        "--scenario", "drain", "--quick", "--jobs", "300", "--codec", "both", "--rounds", "1",
        "--bootstrap", kafka_bootstrap, "--out", str(out),
        "--no-pin", "--no-profile", "--no-charts",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, done.stderr[-3000:]

    result = json.loads((out / "drain.json").read_text())
    assert result["status"] == "ok", result.get("traceback", result["status"])
    assert [(row["codec"], row["round"]) for row in result["rows"]] == [
        ("file", 0), ("registry", 0), ("file", 1), ("registry", 1),
    ]  # fmt: skip
    registry_rows = [row for row in result["rows"] if row["codec"] == "registry"]
    assert all("registry" in row["cpu_s_per_1000_jobs"] for row in registry_rows)
    ratios = result["ratios"]
    assert {"file_median_client_cpu_s_per_1000", "registry_extra_client_cpu_pct"} <= set(ratios)
    assert len(ratios["registry_client_cpu_s_per_1000"]) == 1  # the warm-up is left out
