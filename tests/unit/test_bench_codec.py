"""The file-against-registry comparison of the drain benchmark: medians and the share."""

from __future__ import annotations

from typing import Any

from benchmarks.scenarios.drain import codec_summary


def _row(codec: str, round_no: int, leasekeeper: float, workers: float) -> dict[str, Any]:
    return {
        "codec": codec,
        "round": round_no,
        "jobs_per_s": 1000.0,
        "cpu_s_per_1000_jobs": {"leasekeeper": leasekeeper, "workers": workers, "broker": 9.0},
    }


def test_medians_leave_out_the_warm_up_and_count_client_cpu_only() -> None:
    rows = [
        _row("file", 0, 5.0, 5.0),  # warm-up: far off, must not count
        _row("registry", 0, 5.0, 5.0),
        _row("file", 1, 0.10, 0.10),
        _row("registry", 1, 0.11, 0.10),
        _row("file", 2, 0.12, 0.08),
        _row("registry", 2, 0.10, 0.10),
        _row("file", 3, 0.30, 0.10),
        _row("registry", 3, 0.12, 0.10),
    ]
    summary = codec_summary(rows)
    assert summary["file_client_cpu_s_per_1000"] == [0.2, 0.2, 0.4]
    assert summary["file_median_client_cpu_s_per_1000"] == 0.2
    assert summary["registry_median_client_cpu_s_per_1000"] == 0.21
    assert summary["registry_extra_client_cpu_pct"] == 5.0
