"""The leasekeeper's side of progress: held with the lease (shown by ``inspect job`` and
the snapshot), dropped with it, and the last value kept in the job's status record."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from jobcore.plain import plain
from jobcore.progress import MESSAGE_MAX, JobProgress
from leasekeeper.core.copies import CopyKind
from leasekeeper.core.leases import Grant, SettleKind, Settlement
from leasekeeper.engine import LeaseEngine
from leasekeeper.rpc.wire import settlements, told_progress
from schemas import worker_pb2 as pb
from tests.unit import test_registry_outage as outage
from tests.unit.test_engine import TP, Clock, RecordingRouter, ack, job, make_engine

HALF = JobProgress(0.5, "rendered 1,000 of 2,000 pages")


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _leased(tmp_path: Path, clock: Clock, router: RecordingRouter, **cfg: int) -> tuple[
    LeaseEngine, Grant
]:  # fmt: skip
    engine = make_engine(tmp_path, clock, router, **cfg)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0, max_attempts=1), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    return engine, grant


def _lease_views(engine: LeaseEngine) -> list[dict[str, object]]:
    return [plain(lease) for part in engine.views.snapshot().partitions for lease in part.leases]


def test_a_heartbeat_s_progress_is_held_with_the_lease_and_shown(
    tmp_path: Path, clock: Clock
) -> None:
    engine, grant = _leased(tmp_path, clock, RecordingRouter())
    assert "progress" not in engine.views.job_view("job-0")
    assert "progress" not in _lease_views(engine)[0], "a lease without progress says none"

    engine.workers.heartbeat([(grant.lease_id, grant.token)], progress={grant.lease_id: HALF})
    view = engine.views.job_view("job-0")
    assert view["state"] == "leased"
    assert (view["progress"], view["progress_message"]) == (0.5, HALF.message)
    (lease,) = _lease_views(engine)
    assert (lease["progress"], lease["progress_message"]) == (0.5, HALF.message)

    # A heartbeat without progress (the next one of an older worker) keeps the value.
    engine.workers.heartbeat([(grant.lease_id, grant.token)])
    assert engine.views.job_view("job-0")["progress"] == 0.5


def test_a_refused_heartbeat_s_progress_is_not_taken(tmp_path: Path, clock: Clock) -> None:
    engine, grant = _leased(tmp_path, clock, RecordingRouter())
    (answer,) = engine.workers.heartbeat(
        [(grant.lease_id, "stale")], progress={grant.lease_id: HALF}
    )
    assert not answer.ok
    assert "progress" not in engine.views.job_view("job-0")


def test_the_last_progress_goes_into_the_status_record_of_an_acked_job(
    tmp_path: Path, clock: Clock
) -> None:
    engine, grant = _leased(tmp_path, clock, RecordingRouter())
    engine.workers.heartbeat(
        [(grant.lease_id, grant.token)], progress={grant.lease_id: JobProgress(0.2)}
    )
    engine.workers.heartbeat([(grant.lease_id, grant.token)], progress={grant.lease_id: HALF})
    engine.workers.settle([ack(grant.lease_id, grant.token)])
    (status,) = engine.copies.take_statuses()
    assert status.progress == HALF
    assert engine.views.job_view("job-0")["state"] == "unknown", "dropped with the lease"


def test_a_job_that_never_reported_ends_without_progress(tmp_path: Path, clock: Clock) -> None:
    engine, grant = _leased(tmp_path, clock, RecordingRouter())
    engine.workers.settle([ack(grant.lease_id, grant.token)])
    (status,) = engine.copies.take_statuses()
    assert status.progress is None
    assert b"progress" not in status.encode()


def test_a_dead_job_s_status_record_has_its_last_attempt_s_progress(
    tmp_path: Path, clock: Clock
) -> None:
    router = RecordingRouter()
    engine, grant = _leased(tmp_path, clock, router)
    engine.workers.heartbeat([(grant.lease_id, grant.token)], progress={grant.lease_id: HALF})
    nack = Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK)
    engine.workers.settle([nack])
    ((_, reason, delivered),) = router.deaths
    delivered(True)
    (status,) = engine.copies.take_statuses()
    assert status.state.value == "dead" and reason == "attempts exhausted"
    assert status.progress == HALF


def test_a_lease_that_expires_drops_its_progress_and_the_next_attempt_starts_without(
    tmp_path: Path, clock: Clock
) -> None:
    router = RecordingRouter()
    engine = make_engine(tmp_path, clock, router)
    engine.partitions.assign(TP, 0)
    engine.fetch.offer(TP, 0, job(0), b"x")
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.heartbeat([(grant.lease_id, grant.token)], progress={grant.lease_id: HALF})
    clock.now += 11  # the worker died: no heartbeat, no settle
    assert engine.workers.expire() == 1
    assert _lease_views(engine) == []
    assert engine.views.job_view("job-0")["state"] == "unknown"
    (retry, delivered) = router.retries[0]
    delivered(True)
    engine.fetch.offer(TP, 1, retry, b"x")
    (again,) = engine.workers.claim("w2", 1, wait_s=0)
    assert again.attempt == 2
    assert "progress" not in engine.views.job_view("job-0")
    assert engine.copies.take_statuses() == []


def test_progress_from_the_wire_is_checked_again_and_bounded() -> None:
    def ref(lease_id: str, fraction: float, message: str = "") -> pb.LeaseRef:
        progress = pb.Progress(fraction=fraction, message=message)
        return pb.LeaseRef(lease_id=lease_id, lease_token="t", progress=progress)

    told = told_progress(
        [
            ref("a", 0.25, "ok"),
            ref("b", 1.5),
            ref("c", math.nan),
            ref("d", 1.0, "x" * 10_000),
            pb.LeaseRef(lease_id="e", lease_token="t"),  # a worker that says nothing
        ]
    )
    assert told == {"a": JobProgress(0.25, "ok"), "d": JobProgress(1.0, "x" * MESSAGE_MAX)}


def test_a_dead_letter_held_for_its_schema_keeps_the_progress_for_the_status_record(
    tmp_path: Path,
) -> None:
    clock, registry = outage.Clock(), outage.Registry()
    engine = outage._engine(tmp_path, clock, registry)
    outage._offer(engine, 0, outage._job(max_attempts=1))
    (grant,) = engine.workers.claim("w", 1, wait_s=0)
    engine.workers.heartbeat([(grant.lease_id, grant.token)], progress={grant.lease_id: HALF})
    engine.workers.settle(
        [Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK)]
    )
    copy = outage._held_then_built(engine, clock, registry)  # the registry was down
    assert copy.kind is CopyKind.DEAD
    engine.copies.delivered(copy)
    (status,) = engine.copies.take_statuses()
    assert status.state.value == "dead" and status.progress == HALF


def test_progress_no_heartbeat_carried_comes_with_the_settlement_into_the_status_record(
    tmp_path: Path, clock: Clock
) -> None:
    """A handler that reports in its last second and returns: its ack carries the value
    on its lease reference, and the status record keeps it."""
    engine, grant = _leased(tmp_path, clock, RecordingRouter())
    engine.workers.heartbeat(
        [(grant.lease_id, grant.token)], progress={grant.lease_id: JobProgress(0.2)}
    )
    sent = pb.Settlement(
        lease=pb.LeaseRef(lease_id=grant.lease_id, lease_token=grant.token,
                          progress=pb.Progress(fraction=1.0, message="all 2,000 pages")),
        outcome=pb.ACK,
    )  # fmt: skip
    (item,) = settlements([sent], lambda *_: None)
    assert item.progress == JobProgress(1.0, "all 2,000 pages")
    engine.workers.settle([item])
    (status,) = engine.copies.take_statuses()
    assert status.progress == JobProgress(1.0, "all 2,000 pages")


def test_a_settlement_without_progress_keeps_what_the_heartbeats_said(
    tmp_path: Path, clock: Clock
) -> None:
    router = RecordingRouter()
    engine, grant = _leased(tmp_path, clock, router)
    engine.workers.heartbeat([(grant.lease_id, grant.token)], progress={grant.lease_id: HALF})
    sent = pb.Settlement(lease=pb.LeaseRef(lease_id=grant.lease_id, lease_token=grant.token),
                         outcome=pb.NACK)  # fmt: skip
    (item,) = settlements([sent], lambda *_: None)
    assert item.progress is None
    engine.workers.settle([item])
    ((_, _, delivered),) = router.deaths
    delivered(True)
    (status,) = engine.copies.take_statuses()
    assert status.state.value == "dead" and status.progress == HALF
