"""LeaseKeeperClient: error classification and bounded reconnect backoff."""

from __future__ import annotations

import random
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.client import (
    LeaseKeeperClient,
    LeaseKeeperRejected,
    LeaseKeeperUnavailable,
    ReconnectBackoff,
)


@given(failures=st.integers(min_value=1, max_value=10_000), seed=st.integers())
def test_backoff_stays_within_half_and_full_of_its_capped_base(failures: int, seed: int) -> None:
    backoff = ReconnectBackoff(initial_s=0.05, max_s=2.0, factor=2.0)
    delay = backoff.delay(failures, random.Random(seed))
    base = min(2.0, 0.05 * 2.0 ** min(failures - 1, 64))
    assert base / 2 <= delay <= base <= 2.0


def test_backoff_is_zero_before_any_failure() -> None:
    assert ReconnectBackoff().delay(0, random.Random(1)) == 0.0


def test_a_missing_leasekeeper_is_unavailable_and_later_calls_try_again(tmp_path: Path) -> None:
    now = [100.0]
    client = LeaseKeeperClient(
        f"unix:{tmp_path / 'nobody.sock'}",
        worker_id="w",
        backoff=ReconnectBackoff(initial_s=0.05, max_s=0.05),
        clock=lambda: now[0],
    )
    with client:
        for _ in range(3):
            with pytest.raises(LeaseKeeperUnavailable) as info:
                client.claim(1, 0)
            assert info.value.reconnecting
            assert "UNAVAILABLE" in str(info.value)
            now[0] += 1.0  # past the backoff: the next call opens a new channel


def test_a_closed_client_fails_at_once(tmp_path: Path) -> None:
    client = LeaseKeeperClient(f"unix:{tmp_path / 'lk.sock'}", worker_id="w")
    client.close()
    with pytest.raises(LeaseKeeperUnavailable, match="closed"):
        client.heartbeat([])


def test_an_incompatible_server_is_rejected_not_retried(tmp_path: Path) -> None:
    sock = tmp_path / "lk.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))  # serves nothing
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    try:
        with (
            LeaseKeeperClient(f"unix:{sock}", worker_id="w") as client,
            pytest.raises(LeaseKeeperRejected, match="UNIMPLEMENTED"),
        ):
            client.settle([])
    finally:
        server.stop(0).wait()


def test_a_worker_with_no_leasekeeper_keeps_saying_so_with_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One warning at the first failure, then "still no leasekeeper" after 30 s, 60 s,
    120 s: a worker aimed at the wrong socket never falls silent, nor floods the log."""
    now = [0.0]
    target = f"unix:{tmp_path / 'nobody.sock'}"
    client = LeaseKeeperClient(
        target,
        worker_id="w",
        backoff=ReconnectBackoff(initial_s=0.05, max_s=0.05),
        clock=lambda: now[0],
    )
    caplog.set_level("WARNING", logger="workers.client")
    with client:
        for _ in range(130):  # one failed call per simulated second
            with pytest.raises(LeaseKeeperUnavailable):
                client.claim(1, 0)
            now[0] += 1.0
    still = [r.getMessage() for r in caplog.records if "still no leasekeeper" in r.getMessage()]
    assert [m.split(" after ")[1].split(" s;")[0] for m in still] == ["30", "60", "120"]
    assert all(target in m for m in still)
