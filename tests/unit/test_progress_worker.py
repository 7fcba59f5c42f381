"""A handler's progress in the worker: checked when reported, kept as the latest value
only, and sent on heartbeats (at most one extra heartbeat a second), never a call each."""

from __future__ import annotations

import asyncio
import math
import re
import threading
from collections.abc import Collection, Mapping, Sequence
from fractions import Fraction

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

from jobcore.progress import MESSAGE_MAX, JobProgress
from schemas import worker_pb2
from schemas.lease_answer import LeaseAnswer
from workers.context import JobContext
from workers.decoding import _new_context
from workers.inflight import Held, InFlight
from workers.messages import ClaimedJob, LeaseRef, WorkerSettlement
from workers.monitor import LeaseMonitor
from workers.progress_reports import ProgressReports
from workers.wire import beat, settlement


def _ctx() -> JobContext:
    return _new_context(job_id="j1", attempt=1, tenant_id="t", queue="q", type="render",
                        created_at_ms=1, lease_id="t/0/1")  # fmt: skip


def test_the_latest_value_is_kept_and_the_context_stays_equal_and_frozen() -> None:
    ctx = _ctx()
    assert ctx.last_progress is None
    ctx.progress(0.4, "rendered 800 of 2,000 pages")
    ctx.progress(1)  # an int, and no message
    assert ctx.last_progress == JobProgress(1.0, "")
    assert ctx == _ctx(), "progress is no field: equality and repr are unchanged"
    with pytest.raises(AttributeError):
        ctx.job_id = "other"  # type: ignore[misc]


def test_fractions_of_other_number_types_are_taken() -> None:
    ctx = _ctx()
    ctx.progress(Fraction(2, 5))  # type: ignore[arg-type]
    assert ctx.last_progress == JobProgress(0.4)
    ctx.progress(0)
    assert ctx.last_progress == JobProgress(0.0)


@pytest.mark.parametrize(
    ("fraction", "message", "problem"),
    [
        (40, "", "must be from 0 to 1 (0.4 for 40%), got 40.0"),
        (-0.1, "", "must be from 0 to 1 (0.4 for 40%), got -0.1"),
        (1.0000001, "", "must be from 0 to 1"),
        (math.nan, "", "progress fraction is NaN: pass a number from 0 to 1"),
        (math.inf, "", "must be from 0 to 1"),
        (0.5, "x" * (MESSAGE_MAX + 1), f"is {MESSAGE_MAX + 1} characters, over the 200"),
    ],
)
def test_bad_progress_is_a_value_error_naming_the_problem(
    fraction: float, message: str, problem: str
) -> None:
    ctx = _ctx()
    ctx.progress(0.1, "before")
    with pytest.raises(ValueError, match=re.escape(problem)):
        ctx.progress(fraction, message)
    assert ctx.last_progress == JobProgress(0.1, "before"), "a refused value replaces nothing"


@pytest.mark.parametrize(("fraction", "message"), [("40%", ""), (True, ""), (None, ""), (0.5, 7)])
def test_a_value_of_the_wrong_type_is_a_type_error(fraction: object, message: object) -> None:
    with pytest.raises(TypeError, match=r"progress (fraction must be a number|message must be)"):
        _ctx().progress(fraction, message)  # type: ignore[arg-type]


def test_a_message_of_exactly_the_limit_is_taken() -> None:
    ctx = _ctx()
    ctx.progress(0.5, "é" * MESSAGE_MAX)
    assert ctx.last_progress is not None and len(ctx.last_progress.message) == MESSAGE_MAX


def test_an_async_handler_reports_progress_the_same_way() -> None:
    ctx = _ctx()

    async def handler() -> None:
        for done in range(1, 5):
            ctx.progress(done / 4, f"step {done} of 4")
            await asyncio.sleep(0)

    asyncio.run(handler())
    assert ctx.last_progress == JobProgress(1.0, "step 4 of 4")


# -- on the heartbeat ---------------------------------------------------------------


class Keeper:
    """Answers every heartbeat ok; records each call and the progress it carried."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, JobProgress] | None]] = []

    def heartbeat(
        self,
        refs: Sequence[LeaseRef],
        /,
        started: Collection[str] = (),
        progress: Mapping[str, JobProgress] | None = None,
    ) -> list[LeaseAnswer]:
        self.calls.append(
            ([r.lease_id for r in refs], None if progress is None else dict(progress))
        )
        return [LeaseAnswer(lease_id=r.lease_id, ok=True, until_ms=99_000) for r in refs]


class Clock:
    now = 0.0


def _held(table: InFlight, i: int, *, lease_s: int = 30) -> Held:
    ref = LeaseRef(lease_id=f"t/0/{i}", token=f"tok{i}")
    lease = ClaimedJob(ref=ref, until_ms=40_000, attempt=1, envelope=b"", lease_s=lease_s)
    ctx = _new_context(job_id=f"j{i}", attempt=1, tenant_id="t", queue="q", type="render",
                       created_at_ms=0, lease_id=ref.lease_id)  # fmt: skip
    held = table.add(lease, ctx, now=0.0, beat_interval_s=lease_s / 3)
    table.start(held, now=0.0, timeout_s=None)
    return held


def _monitor(table: InFlight, keeper: Keeper, clock: Clock) -> LeaseMonitor:
    return LeaseMonitor(table=table, client=keeper, on_timeout=lambda held: None,
                        stop=threading.Event(), clock=lambda: clock.now,
                        wall_ms=lambda: 10_000)  # fmt: skip


def test_a_tight_loop_of_reports_costs_one_heartbeat_a_second_with_the_latest() -> None:
    table, keeper, clock = InFlight(concurrency=4), Keeper(), Clock()
    busy, quiet = _held(table, 1), _held(table, 2)
    monitor = _monitor(table, keeper, clock)

    for page in range(1, 10_001):
        busy.ctx.progress(page / 20_000, f"rendered {page} pages")
    assert keeper.calls == [], "reporting makes no call"
    clock.now = 0.1
    monitor.tick()
    # One heartbeat, naming only the lease with news, carrying the last value only.
    assert keeper.calls == [(["t/0/1"], {"t/0/1": JobProgress(0.5, "rendered 10000 pages")})]
    busy.ctx.progress(0.6)
    clock.now = 0.6
    monitor.tick()
    assert len(keeper.calls) == 1, "news waits out the second since the last send"
    clock.now = 1.1
    monitor.tick()
    assert keeper.calls[-1] == (["t/0/1"], {"t/0/1": JobProgress(0.6)})
    clock.now = 2.5
    monitor.tick()
    assert len(keeper.calls) == 2, "a value already sent is not sent again early"
    assert quiet.ctx.last_progress is None


def test_every_regular_heartbeat_carries_the_latest_progress_of_those_that_have_one() -> None:
    table, keeper, clock = InFlight(concurrency=4), Keeper(), Clock()
    busy, quiet = _held(table, 1, lease_s=3), _held(table, 2, lease_s=3)
    busy.ctx.progress(0.25, "a quarter")
    monitor = _monitor(table, keeper, clock)
    clock.now = 0.1
    monitor.tick()  # the early one
    clock.now = 1.0  # a third of the lease: every held lease is due
    monitor.tick()
    assert keeper.calls[-1] == (["t/0/1", "t/0/2"], {"t/0/1": JobProgress(0.25, "a quarter")})
    assert busy.until_ms == quiet.until_ms == 99_000


def test_a_worker_whose_handlers_never_report_sends_heartbeats_as_before() -> None:
    table, keeper, clock = InFlight(concurrency=4), Keeper(), Clock()
    _held(table, 1, lease_s=3)
    monitor = _monitor(table, keeper, clock)
    clock.now = 0.5
    monitor.tick()
    assert keeper.calls == []
    clock.now = 1.0
    monitor.tick()
    assert keeper.calls == [(["t/0/1"], None)], "no progress argument at all"


def test_a_heartbeat_message_carries_progress_only_for_a_lease_that_has_one() -> None:
    ref = LeaseRef(lease_id="t/0/1", token="tok")
    told = worker_pb2.LeaseRef.FromString(beat(ref, True, JobProgress(0.0)).SerializeToString())
    assert told.HasField("progress") and told.progress.fraction == 0.0 and told.started
    silent = worker_pb2.LeaseRef.FromString(beat(ref, False, None).SerializeToString())
    assert not silent.HasField("progress")
    assert (silent.lease_id, silent.lease_token) == ("t/0/1", "tok")


def test_the_monitor_walks_its_jobs_for_progress_only_after_a_report() -> None:
    walks: list[int] = []
    table = InFlight(concurrency=4)
    held = _held(table, 1)

    def beating() -> list[Held]:
        walks.append(1)
        return table.beating()

    reports = ProgressReports()
    reports.due(beating, now=1.0)  # the first look walks once: reports made before it
    assert reports.due(beating, now=5.0) == [] and walks == [1], "no report since: no walk"
    held.ctx.progress(0.3)
    assert reports.due(beating, now=5.0) == [held] and walks == [1, 1]
    reports.take([held], now=5.0)
    assert reports.due(beating, now=7.0) == [] and walks == [1, 1], "no report since"
    other = ProgressReports()  # another worker's monitor in the process sees it too
    assert other.due(beating, now=7.0) == [held]


def _lease_ref_before_progress() -> type[Message]:
    """``LeaseRef`` as workers and leasekeepers from before the progress field know it."""
    proto = descriptor_pb2.FileDescriptorProto(name="before_progress.proto", package="before")
    ref = proto.message_type.add(name="LeaseRef")
    for name, number, kind in (
        ("lease_id", 1, descriptor_pb2.FieldDescriptorProto.TYPE_STRING),
        ("lease_token", 2, descriptor_pb2.FieldDescriptorProto.TYPE_STRING),
        ("started", 61, descriptor_pb2.FieldDescriptorProto.TYPE_BOOL),
    ):
        ref.field.add(name=name, number=number, type=kind,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)  # fmt: skip
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("before.LeaseRef"))


def test_the_wire_stays_compatible_both_ways() -> None:
    before = _lease_ref_before_progress()
    sent = beat(LeaseRef(lease_id="t/0/1", token="tok"), True, JobProgress(0.4, "x"))
    old = before.FromString(sent.SerializeToString())  # an older leasekeeper reads it
    assert (old.lease_id, old.lease_token, old.started) == ("t/0/1", "tok", True)
    older = before(lease_id="t/0/2", lease_token="tok", started=True)  # an older worker's
    new = worker_pb2.LeaseRef.FromString(older.SerializeToString())
    assert (new.lease_id, new.started, new.HasField("progress")) == ("t/0/2", True, False)


def test_a_settlement_carries_the_handler_s_last_progress_on_its_lease_reference() -> None:
    """So a value reported after the last heartbeat still reaches the status record."""
    ref = LeaseRef("jobs.q/0/7", "tok")
    done = JobProgress(1.0, "all 2,000 pages")
    acked = settlement(WorkerSettlement.ack(ref, 0.5, b"", done))
    assert acked.lease.HasField("progress")
    assert (acked.lease.progress.fraction, acked.lease.progress.message) == (1.0, done.message)
    plain = settlement(WorkerSettlement.ack(ref, 0.5))
    assert not plain.lease.HasField("progress"), "a handler that never reported sends none"
    assert plain.ByteSize() < acked.ByteSize()
