"""Bounded control state: pruning by an injected clock, and tombstones."""

from __future__ import annotations

from jobcore.control import Cancellation, DedupeClaim, dedupe_index_key
from leasekeeper.core.control_state import ControlState
from leasekeeper.views.inspect_view import control_line
from schemas.job import Job

HOUR_MS = 3600 * 1000
DAY_MS = 24 * HOUR_MS
T0 = 1_800_000_000_000


def claim(key: str, at_ms: int, job_id: str | None = None) -> DedupeClaim:
    return DedupeClaim(tenant_id="acme", dedupe_key=key, job_id=job_id or key, seen_at_ms=at_ms)


def cancellation(job_id: str, at_ms: int) -> Cancellation:
    return Cancellation(job_id=job_id, cancelled_at_ms=at_ms)


def keyed_job(key: str, job_id: str) -> Job:
    return Job(
        job_id=job_id,
        queue="q",
        tenant_id="acme",
        type="noop",
        payload=b"",
        dedupe_key=key,
        created_at_ms=T0,
    )


def test_claims_past_the_dedupe_window_are_pruned_and_fresh_ones_kept() -> None:
    state = ControlState(dedupe_window_ms=DAY_MS)
    for i in range(5):
        state.remember(claim(f"k{i}", T0 + i * HOUR_MS))
    assert state.prune(T0 + DAY_MS) == 0
    assert state.prune(T0 + DAY_MS + 2 * HOUR_MS + 1) == 3
    assert sorted(state.claims) == [dedupe_index_key("acme", "k3"), dedupe_index_key("acme", "k4")]
    assert state.pruned == 3
    assert state.sizes() == (0, 2)


def test_pruning_never_changes_a_decision() -> None:
    state = ControlState(dedupe_window_ms=DAY_MS)
    state.remember(claim("k", T0, job_id="first"))
    later, second = T0 + DAY_MS + 1, keyed_job("k", "second")
    before = (state.duplicate_of(second, later), state.needs_claim(second, later))
    state.prune(later)
    after = (state.duplicate_of(second, later), state.needs_claim(second, later))
    assert before == after == (None, True)


def test_a_key_claimed_again_moves_to_the_back_of_the_pruning_order() -> None:
    state = ControlState(dedupe_window_ms=DAY_MS)
    state.remember(claim("a", T0))
    state.remember(claim("b", T0 + HOUR_MS))
    state.remember(claim("a", T0 + 2 * DAY_MS))  # "a" was stale: a new first job
    assert state.prune(T0 + 2 * DAY_MS) == 1
    assert list(state.claims) == [dedupe_index_key("acme", "a")]


def test_cancellations_past_their_retention_are_pruned() -> None:
    state = ControlState(cancel_retention_ms=35 * DAY_MS)
    state.cancel(cancellation("old", T0))
    state.cancel(cancellation("new", T0 + 10 * DAY_MS))
    assert state.prune(T0 + 35 * DAY_MS) == 0
    assert state.prune(T0 + 36 * DAY_MS) == 1
    assert not state.is_cancelled("old")
    assert state.is_cancelled("new")


def test_records_already_past_their_window_are_not_kept_at_catch_up() -> None:
    state = ControlState(dedupe_window_ms=DAY_MS, cancel_retention_ms=35 * DAY_MS)
    now = T0 + 40 * DAY_MS
    state.remember(claim("gone", T0), now_ms=now)
    state.cancel(cancellation("gone", T0), now_ms=now)
    state.remember(claim("kept", now - HOUR_MS), now_ms=now)
    assert state.sizes() == (0, 1)


def test_tombstones_remove_their_key() -> None:
    state = ControlState()
    state.remember(claim("k", T0))
    state.cancel(cancellation("j1", T0))
    state.forget_claim(dedupe_index_key("acme", "k"))
    state.uncancel("j1")
    state.forget_claim(b"never-seen")
    assert state.sizes() == (0, 0)
    assert not state.is_cancelled("j1")
    assert state.needs_claim(keyed_job("k", "other"), T0)


def test_inspect_shows_the_control_state_and_the_catch_up() -> None:
    snapshot = {
        "control": {
            "cancellations": 3,
            "dedupe_claims": 1_000_000,
            "pruned": 12,
            "catch_up_s": 4.25,
            "catch_up_records": 1_000_003,
        }
    }
    line = control_line(snapshot)
    assert "cancellations 3" in line and "dedupe keys 1000000" in line
    assert "pruned 12" in line and "read 1000003 records in 4.25s at start" in line
    assert control_line({}) == ""
