"""A state directory belongs to one cluster, group and set of topics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from leasekeeper.core.state_identity import StateCheck, StateIdentity, StateMismatch, check_identity
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.store_values import Resolution

TOPIC = "jobs.q"
TIER = "jobs.q.retry.1s"


def identity(cluster: str = "A", group: str = "g", **ids: str) -> StateIdentity:
    topics = {TOPIC: "t-1", TIER: "r-1"}
    topics.update({k.replace("_", "."): v for k, v in ids.items()})
    return StateIdentity(cluster_id=cluster, group_id=group, topic_ids=topics)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LeaseStore]:
    opened = LeaseStore(tmp_path / "state")
    yield opened
    opened.close()


def acked_offsets(store: LeaseStore) -> dict[int, Resolution]:
    return store.load(TOPIC, 0, 0).resolved


def remember_acks(store: LeaseStore) -> None:
    batch = store.batch()
    for offset in range(3):
        batch.resolve(TOPIC, 0, offset, Resolution.ACKED)
    store.write(batch)


def test_the_first_start_records_and_the_next_one_matches(
    store: LeaseStore, tmp_path: Path
) -> None:
    assert check_identity(store, identity(), state_dir=tmp_path, reset=False) is StateCheck.RECORDED
    assert check_identity(store, identity(), state_dir=tmp_path, reset=False) is StateCheck.MATCHED


def test_a_store_recorded_for_cluster_a_refuses_cluster_b_with_the_fix(
    store: LeaseStore, tmp_path: Path
) -> None:
    check_identity(store, identity(cluster="A"), state_dir=tmp_path / "state", reset=False)
    remember_acks(store)
    with pytest.raises(StateMismatch) as raised:
        check_identity(store, identity(cluster="B"), state_dir=tmp_path / "state", reset=False)
    message = str(raised.value)
    assert f"state dir {tmp_path / 'state'}" in message
    assert "cluster id recorded A, found B" in message
    assert "--reset-state" in message and "--state-dir" in message
    assert message.count("\n") == 1  # the problem, then the fix
    assert len(acked_offsets(store)) == 3  # refused: nothing wiped


def test_a_recreated_topic_or_another_group_is_a_mismatch(
    store: LeaseStore, tmp_path: Path
) -> None:
    check_identity(store, identity(), state_dir=tmp_path, reset=False)
    with pytest.raises(StateMismatch, match=rf"topic {TOPIC} id recorded t-1, found t-2"):
        check_identity(store, identity(jobs_q="t-2"), state_dir=tmp_path, reset=False)
    with pytest.raises(StateMismatch, match="group id recorded g, found other"):
        check_identity(store, identity(group="other"), state_dir=tmp_path, reset=False)


def test_reset_state_wipes_the_store_and_records_the_new_identity(
    store: LeaseStore, tmp_path: Path
) -> None:
    check_identity(store, identity(cluster="A"), state_dir=tmp_path, reset=False)
    remember_acks(store)
    outcome = check_identity(store, identity(cluster="B"), state_dir=tmp_path, reset=True)
    assert outcome is StateCheck.RESET
    assert acked_offsets(store) == {}
    assert check_identity(store, identity(cluster="B"), state_dir=tmp_path, reset=False) is (
        StateCheck.MATCHED
    )


def test_reset_state_keeps_a_matching_store(store: LeaseStore, tmp_path: Path) -> None:
    check_identity(store, identity(), state_dir=tmp_path, reset=False)
    remember_acks(store)
    assert check_identity(store, identity(), state_dir=tmp_path, reset=True) is StateCheck.MATCHED
    assert len(acked_offsets(store)) == 3


def test_a_tier_added_by_configuration_is_recorded_not_refused(
    store: LeaseStore, tmp_path: Path
) -> None:
    check_identity(store, identity(), state_dir=tmp_path, reset=False)
    wider = identity(jobs_q_retry_1h="r-9")
    assert check_identity(store, wider, state_dir=tmp_path, reset=False) is StateCheck.MATCHED
    with pytest.raises(StateMismatch, match=r"jobs\.q\.retry\.1h id recorded r-9, found r-10"):
        check_identity(store, identity(jobs_q_retry_1h="r-10"), state_dir=tmp_path, reset=False)


def test_the_identity_survives_a_reopen(tmp_path: Path) -> None:
    first = LeaseStore(tmp_path / "s")
    check_identity(first, identity(cluster="A"), state_dir=tmp_path, reset=False)
    first.close()
    again = LeaseStore(tmp_path / "s")
    try:
        with pytest.raises(StateMismatch):
            check_identity(again, identity(cluster="B"), state_dir=tmp_path, reset=False)
    finally:
        again.close()
