"""Missed fires: late (fire each), misfired (catch up once, or skip), and the leader
loop that applies them, with an injected clock and in-memory fakes for Kafka."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobcore.cron_board import CronEntryView
from producer.scheduler.entry import CronEntry, MisfirePolicy, dedupe_key
from producer.scheduler.loop import RETRY_AFTER, CronLoop
from producer.scheduler.misfire import decide
from producer.scheduler.state import LastFire
from producer.scheduler.table import CronTable, Fire, FireKind
from producer.scheduler.timing import CronSchedule

T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)
EVERY_MINUTE = CronSchedule.parse("* * * * *", "UTC")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def entry(name: str = "tick", **overrides: Any) -> CronEntry:
    fields: dict[str, Any] = {
        "name": name,
        "schedule": "* * * * *",
        "queue": "q",
        "type": "noop",
        "tenant": "acme",
    }
    return CronEntry(**{**fields, **overrides})


# -- the decision --------------------------------------------------------------------


def test_nothing_is_due_before_the_next_fire() -> None:
    decision = decide(EVERY_MINUTE, MisfirePolicy.SKIP, since=at(0), now=at(59.9), grace=GRACE)
    assert decision.fires == ()
    assert decision.resume_after == at(0)


def test_a_fire_that_is_due_now_is_made() -> None:
    decision = decide(EVERY_MINUTE, MisfirePolicy.SKIP, since=at(0), now=at(60.01), grace=GRACE)
    assert decision.fires == (at(60),)
    assert decision.missed is None


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_fires_late_by_less_than_the_grace_are_all_made(policy: MisfirePolicy) -> None:
    """A failover: the new leader makes every fire the old one missed, whatever the policy."""
    schedule = CronSchedule.parse("*/2 * * * * *", "UTC")
    decision = decide(schedule, policy, since=at(0), now=at(9), grace=timedelta(seconds=10))
    assert decision.fires == (at(2), at(4), at(6), at(8))
    assert not decision.catch_up


def test_catch_up_once_makes_one_fire_for_the_misfired_window() -> None:
    decision = decide(
        EVERY_MINUTE, MisfirePolicy.CATCH_UP_ONCE, since=at(0), now=at(3600 + 30), grace=GRACE
    )
    assert decision.fires == (at(3600),)  # the most recent missed fire time
    assert decision.catch_up
    assert decision.missed == (at(60), at(3600))


def test_skip_makes_no_fire_and_resumes_at_the_next_fire_time() -> None:
    decision = decide(EVERY_MINUTE, MisfirePolicy.SKIP, since=at(0), now=at(3630), grace=GRACE)
    assert decision.fires == ()
    assert decision.missed == (at(60), at(3600))
    assert EVERY_MINUTE.next_after(decision.resume_after) == at(3660)


def test_a_long_outage_of_a_frequent_entry_is_decided_without_walking_it() -> None:
    every_second = CronSchedule.parse("* * * * * *", "UTC")
    month = 30 * 24 * 3600
    decision = decide(
        every_second, MisfirePolicy.CATCH_UP_ONCE, since=at(0), now=at(month), grace=GRACE
    )
    assert decision.fires == (at(month),)


def test_a_last_fire_ahead_of_the_clock_fires_nothing() -> None:
    """A new leader whose clock is behind the old one's: no fire twice."""
    decision = decide(
        EVERY_MINUTE, MisfirePolicy.CATCH_UP_ONCE, since=at(120), now=at(90), grace=GRACE
    )
    assert decision.fires == ()


# -- the table -----------------------------------------------------------------------


def test_the_table_fires_each_time_once_and_moves_on() -> None:
    table = CronTable(grace=GRACE)
    table.add(entry(), since=at(0))
    assert table.next_due() == at(60)
    [fire] = table.due(at(60.5)).fires
    assert (fire.at, fire.kind, fire.dedupe_key) == (
        at(60),
        FireKind.SCHEDULED,
        "tick@2025-06-01T12:01:00Z",
    )
    table.fired(fire)
    assert table.due(at(61)).fires == ()
    assert table.next_due() == at(120)


def test_a_skipped_window_is_consumed_and_reported_once() -> None:
    table = CronTable(grace=GRACE)
    table.add(entry(misfire=MisfirePolicy.SKIP), since=at(0))
    due = table.due(at(600.5))
    assert due.fires == ()
    assert [(s.first, s.last) for s in due.skips] == [(at(60), at(600))]
    assert table.due(at(601)).skips == ()
    assert table.next_due() == at(660)


def test_a_catch_up_fire_is_marked_and_then_the_schedule_resumes() -> None:
    table = CronTable(grace=GRACE)
    table.add(entry(), since=at(0))
    [fire] = table.due(at(600.5)).fires
    assert (fire.at, fire.kind) == (at(600), FireKind.CATCH_UP)
    table.fired(fire)
    assert table.next_due() == at(660)


def test_a_held_entry_waits_and_fires_of_several_entries_come_oldest_first() -> None:
    table = CronTable(grace=GRACE)
    table.add(entry("b", schedule="*/10 * * * * *"), since=at(0))
    table.add(entry("a", schedule="*/15 * * * * *"), since=at(0))
    due = table.due(at(30))
    assert [(f.entry.name, f.at) for f in due.fires] == [
        ("b", at(10)),
        ("a", at(15)),
        ("b", at(20)),
        ("a", at(30)),
        ("b", at(30)),
    ]
    table.hold("a", at(35))
    assert [f.entry.name for f in table.due(at(31)).fires] == ["b"] * 3
    assert table.next_due() == at(10)  # b still owes its fires; a waits until 35


def test_an_entry_is_added_once() -> None:
    table = CronTable(grace=GRACE)
    table.add(entry(), since=at(0))
    with pytest.raises(ValueError, match="already scheduled"):
        table.add(entry(), since=at(0))


# -- the leader loop -----------------------------------------------------------------


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now.timestamp()

    def __call__(self) -> float:
        return self.now

    def set(self, instant: datetime) -> None:
        self.now = instant.timestamp()


@dataclass
class FakeLeader:
    term: int | None = None
    polls: list[float] = field(default_factory=list)
    revoke_after_polls: int | None = None

    def poll(self, timeout: float) -> None:
        self.polls.append(timeout)
        if self.revoke_after_polls is not None and len(self.polls) >= self.revoke_after_polls:
            self.term = None


@dataclass
class FakeState:
    last: dict[str, LastFire] = field(default_factory=dict)
    reads: int = 0
    fail_reads: int = 0

    def read(self) -> Mapping[str, LastFire]:
        self.reads += 1
        if self.fail_reads:
            self.fail_reads -= 1
            raise TimeoutError("state topic unreachable")
        return dict(self.last)

    def record(self, name: str, fire: LastFire) -> None:
        self.last[name] = fire

    def poll(self) -> None:
        pass


@dataclass
class FakeSink:
    fires: list[Fire] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)

    def __call__(self, fire: Fire) -> str:
        if fire.entry.name in self.failing:
            raise RuntimeError("queue has no topic")
        self.fires.append(fire)
        return f"job-{len(self.fires)}"

    def keys(self) -> list[str]:
        return [fire.dedupe_key for fire in self.fires]


def make_loop(clock: Clock, leader: FakeLeader, state: FakeState, sink: FakeSink) -> CronLoop:
    return CronLoop(leader=leader, state=state, sink=sink, grace=GRACE, clock=clock)


def test_a_follower_fires_nothing() -> None:
    clock, leader, state, sink = Clock(at(0)), FakeLeader(), FakeState(), FakeSink()
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry())
    clock.set(at(120))
    loop.step()
    assert (sink.fires, state.reads, loop.is_leader) == ([], 0, False)


def test_a_new_leader_reads_the_last_fires_then_fires_what_the_old_one_missed() -> None:
    clock, leader, sink = Clock(at(130)), FakeLeader(term=1), FakeSink()
    state = FakeState(last={"tick": LastFire(at=at(60), job_id="old")})
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry())
    loop.step()
    assert sink.keys() == [dedupe_key("tick", at(120))]
    assert state.last["tick"] == LastFire(at=at(120), job_id="job-1")
    loop.step()
    assert state.reads == 1  # once per term


def test_an_entry_never_fired_starts_at_the_next_fire_after_leadership() -> None:
    clock, leader, state, sink = Clock(at(30)), FakeLeader(term=1), FakeState(), FakeSink()
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry())
    loop.step()
    assert sink.fires == []
    clock.set(at(60.2))
    loop.step()
    assert sink.keys() == [dedupe_key("tick", at(60))]


def test_the_loop_waits_no_longer_than_until_the_next_fire() -> None:
    clock, leader, state, sink = Clock(at(59.97)), FakeLeader(term=1), FakeState(), FakeSink()
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry())
    loop.step()
    loop.step()
    assert leader.polls[0] == 0.1  # not leader yet: just take part in the group
    assert leader.polls[1] == pytest.approx(0.03, abs=1e-6)


def test_a_revoked_leader_stops_between_two_fires() -> None:
    clock, sink = Clock(at(0)), FakeSink()
    state = FakeState(last={"tick": LastFire(at=at(0))})
    leader = FakeLeader(term=1, revoke_after_polls=3)  # the step's poll, fire 1's, then revoked
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry(schedule="* * * * * *"))
    clock.set(at(5))  # five fires due
    loop.step()
    assert sink.keys() == [dedupe_key("tick", at(1))]
    loop.step()
    assert not loop.is_leader
    assert len(sink.fires) == 1


def test_winning_leadership_again_rereads_the_state() -> None:
    clock, leader, sink = Clock(at(10)), FakeLeader(term=1), FakeSink()
    state = FakeState(last={"tick": LastFire(at=at(0))})
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry())
    loop.step()
    state.last["tick"] = LastFire(at=at(60))  # another leader fired meanwhile
    leader.term = 2
    clock.set(at(61))
    loop.step()
    assert state.reads == 2
    assert sink.fires == []  # 12:01 was fired by the other leader


def test_no_fire_before_the_last_fires_are_known() -> None:
    clock, leader, sink = Clock(at(61)), FakeLeader(term=1), FakeSink()
    state = FakeState(last={"tick": LastFire(at=at(0))}, fail_reads=1)
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry())
    loop.step()
    assert sink.fires == [] and not loop.is_leader
    loop.step()
    assert sink.keys() == [dedupe_key("tick", at(60))]


def test_a_failing_entry_is_retried_later_and_does_not_block_the_others() -> None:
    clock, leader, sink = Clock(at(0)), FakeLeader(term=1), FakeSink(failing={"bad"})
    state = FakeState(last={"bad": LastFire(at=at(0)), "good": LastFire(at=at(0))})
    loop = make_loop(clock, leader, state, sink)
    loop.add(entry("bad", schedule="*/2 * * * * *"))
    loop.add(entry("good", schedule="*/2 * * * * *"))
    clock.set(at(4))
    loop.step()
    assert [f.entry.name for f in sink.fires] == ["good", "good"]
    sink.failing.clear()
    clock.set(at(4) + RETRY_AFTER - timedelta(seconds=1))
    loop.step()
    assert [f.entry.name for f in sink.fires] == ["good"] * 4
    clock.set(at(4) + RETRY_AFTER)
    loop.step()
    bad = [f.at for f in sink.fires if f.entry.name == "bad"]
    assert bad == [at(s) for s in range(2, 10, 2)]  # late but within the grace: none lost


def test_an_entry_added_while_leading_starts_from_its_recorded_last_fire() -> None:
    clock, leader, sink = Clock(at(90)), FakeLeader(term=1), FakeSink()
    state = FakeState(last={"late": LastFire(at=at(0))})
    loop = make_loop(clock, leader, state, sink)
    loop.step()
    loop.add(entry("late"))
    loop.step()
    assert sink.keys() == [dedupe_key("late", at(60))]


@dataclass
class FakeBoard:
    shown: dict[str, CronEntryView] = field(default_factory=dict)
    replaced: int = 0

    def replace(self, views: Iterable[CronEntryView]) -> None:
        self.replaced += 1
        self.shown = {view.name: view for view in views}

    def publish(self, view: CronEntryView) -> None:
        self.shown[view.name] = view


def test_the_leader_shows_each_entry_with_its_next_and_last_fire_on_the_board() -> None:
    clock, leader, sink, board = Clock(at(30)), FakeLeader(term=1), FakeSink(), FakeBoard()
    state = FakeState(last={"tick": LastFire(at=at(0), job_id="old")})
    loop = CronLoop(leader=leader, state=state, sink=sink, grace=GRACE, clock=clock,
                    board=board, leader_id="host:1")  # fmt: skip
    loop.add(entry())
    loop.step()
    shown = board.shown["tick"]
    assert board.replaced == 1  # at the start of the term, before any fire
    assert (shown.next_fire_ms, shown.last_fire_ms, shown.last_job_id) == (
        ms(at(60)),
        ms(at(0)),
        "old",
    )
    assert (shown.schedule, shown.queue, shown.leader) == (entry().schedule, "q", "host:1")
    clock.set(at(60.2))
    loop.step()
    shown = board.shown["tick"]
    assert (shown.next_fire_ms, shown.last_fire_ms, shown.last_job_id) == (
        ms(at(120)),
        ms(at(60)),
        "job-1",
    )


def ms(instant: datetime) -> int:
    return round(instant.timestamp() * 1000)
