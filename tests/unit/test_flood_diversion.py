"""The producer's flood diversion and the leasekeeper's switch holds, on fake clocks."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from jobcore.kafka import KafkaSettings, TopicPartition
from jobcore.topics import ENV_GROUP, queue_group
from leasekeeper.core.leases import TopicPart
from leasekeeper.ops.cli import main as serve_main
from leasekeeper.overflow.switch_hold import CommitReader, SwitchHolds
from memkafka import Cluster, installed
from producer import JobProducer
from producer.diversion import POSTPONE_S, Diverter
from producer.flood import CHECK_INTERVAL_S, MAX_BUCKETS, FloodGate, FloodPolicy
from schemas.job import Job
from schemas.job_headers import Switch, read_switch, switch_header

KEY = ("jobs.q", "acme")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gate(burst: int = 10, rate: float = 5.0) -> tuple[FloodGate, Clock]:
    clock = Clock()
    return FloodGate(policy=FloodPolicy(burst=burst, rate=rate), clock=clock), clock


def test_a_tenant_is_a_flood_once_its_burst_is_spent_and_not_after_it_refills() -> None:
    flood, clock = gate(burst=10, rate=5.0)
    assert [flood.over(KEY) for _ in range(11)] == [False] * 10 + [True]
    clock.now += 1.0  # five tokens back
    assert [flood.over(KEY) for _ in range(6)] == [False] * 5 + [True]
    assert not flood.over(("jobs.q", "other")), "each tenant has its own bucket"


@given(steps=st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=300))
def test_no_more_jobs_pass_than_the_burst_plus_the_rate_over_the_time(steps: list[float]) -> None:
    flood, clock = gate(burst=20, rate=50.0)
    passed, start = 0, clock.now
    for dt in steps:
        clock.now += dt
        passed += not flood.over(KEY)
    assert passed <= 20 + 50.0 * (clock.now - start) + 1e-6


def test_the_way_back_is_looked_up_only_when_calm_delivered_and_due() -> None:
    flood, clock = gate(burst=10, rate=5.0)
    for _ in range(11):
        flood.over(KEY)
    diversion = flood.begin(KEY, (2, 41), now_ms=1_000)
    assert diversion.deadline_ms == 1_000 + 30_000
    diversion.in_flight = 1
    clock.now += 10  # calm again
    assert not flood.due_check(KEY), "a diverted record is still on its way"
    diversion.delivered(3, 7)
    assert flood.due_check(KEY)
    assert not flood.due_check(KEY), "once per interval"
    clock.now += CHECK_INTERVAL_S
    assert flood.due_check(KEY)
    clock.now += CHECK_INTERVAL_S
    for _ in range(20):
        flood.over(KEY)
    assert not flood.due_check(KEY), "still flooding: its bucket is empty"


def test_a_diversion_ends_only_past_its_last_delivered_record() -> None:
    flood, _ = gate()
    diversion = flood.begin(KEY, None, now_ms=0)
    diversion.in_flight = 2
    diversion.delivered(1, 10)
    diversion.delivered(1, 12)
    assert (diversion.partition, diversion.last, diversion.in_flight) == (1, 12, 0)
    assert not flood.may_end(KEY, 12), "the commit has not passed offset 12"
    assert flood.may_end(KEY, 13)
    assert KEY not in flood.diversions


def test_a_failed_diverted_record_no_longer_counts_as_on_its_way() -> None:
    flood, _ = gate()
    diversion = flood.begin(KEY, None, now_ms=0)
    diversion.in_flight = 1
    diversion.failed()
    assert diversion.in_flight == 0
    assert flood.may_end(KEY, 0)


def test_pruning_keeps_the_buckets_of_diverted_tenants() -> None:
    flood, clock = gate(burst=2, rate=0.001)
    for _ in range(3):
        flood.over(KEY)
    flood.begin(KEY, None, now_ms=0)
    for n in range(MAX_BUCKETS + 5):
        flood.over(("jobs.q", f"t{n}"))
        flood.over(("jobs.q", f"t{n}"))  # empty: nothing to prune as full
        clock.now += 0.0001
    assert len(flood._buckets) <= MAX_BUCKETS
    assert flood.over(KEY), "the diverted tenant's empty bucket was kept"


def test_the_policy_reads_the_environment_and_names_a_bad_value() -> None:
    assert FloodPolicy.from_env({}) == FloodPolicy()
    policy = FloodPolicy.from_env({"JOBS_FLOOD_BURST": "50", "JOBS_FLOOD_RATE": "2.5"})
    assert (policy.burst, policy.rate, policy.enabled) == (50, 2.5, True)
    assert not FloodPolicy.from_env({"JOBS_FLOOD_BURST": "0"}).enabled
    assert not FloodPolicy.off().enabled
    with pytest.raises(ValueError, match="JOBS_FLOOD_BURST='lots'"):
        FloodPolicy.from_env({"JOBS_FLOOD_BURST": "lots"})
    with pytest.raises(ValueError, match="rate must be > 0"):
        FloodPolicy(rate=0)


def test_a_switch_header_reads_back_and_a_malformed_one_is_no_switch() -> None:
    header = switch_header(Switch("jobs.q.critical", 3, 1234, 99))
    switch = read_switch([("job_id", b"x"), header])
    assert switch is not None
    assert (switch.topic, switch.partition, switch.offset, switch.deadline_ms) == (
        "jobs.q.critical", 3, 1234, 99,
    )  # fmt: skip
    assert read_switch([("lq.sw", b"jobs.q,3,x,9")]) is None
    assert read_switch([("lq.sw", None)]) is None
    assert read_switch(None) is None


@dataclass
class FakeSource:
    committed_at: dict[tuple[str, int], int]
    asked: int = 0
    closed: bool = False

    def committed(self, parts: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        self.asked += 1
        return [
            TopicPartition(p.topic, p.partition, self.committed_at.get((p.topic, p.partition), -1))
            for p in parts
        ]

    def close(self) -> None:
        self.closed = True


def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Await the reader's thread: a condition polled with a deadline, not a sleep."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_a_held_record_passes_once_the_ready_partitions_commit_is_past_its_switch() -> None:
    source = FakeSource({("jobs.q", 1): 50})
    reader = CommitReader(lambda: source, interval_s=0.0)
    wall = [1_000]
    holds = SwitchHolds(reader, clock_ms=lambda: wall[0])
    switch = Switch("jobs.q", 1, 50, deadline_ms=5_000)
    try:
        assert not holds.passed(switch)
        assert eventually(lambda: reader.known(TopicPart("jobs.q", 1)) == 50)
        assert not holds.passed(switch), "committed 50 has not passed offset 50"
        source.committed_at[("jobs.q", 1)] = 51
        assert eventually(lambda: reader.known(TopicPart("jobs.q", 1)) == 51)
        assert holds.passed(switch)
        assert holds.held == 2
    finally:
        holds.close()
    assert source.closed, "the reader's consumer is closed with it"


def test_the_reader_asks_only_while_something_waits() -> None:
    source = FakeSource({})
    reader = CommitReader(lambda: source, interval_s=0.0)
    try:
        reader.want(TopicPart("jobs.q", 0))
        assert eventually(lambda: reader.lookups == 1)
        asked = source.asked
        assert not eventually(lambda: source.asked > asked, timeout=0.05), "nothing waits"
    finally:
        reader.close()


def test_a_switch_stops_holding_at_its_deadline_and_passes_without_a_reader() -> None:
    wall = [1_000]
    reader = CommitReader(lambda: FakeSource({}))
    holds = SwitchHolds(reader, clock_ms=lambda: wall[0])
    switch = Switch("jobs.q", 0, 10, deadline_ms=2_000)
    try:
        assert not holds.passed(switch)
        wall[0] = 2_000
        assert holds.passed(switch)
    finally:
        holds.close()
    assert SwitchHolds(None).passed(Switch("jobs.q", 0, 10, deadline_ms=2**60))


def job(tenant: str = "acme") -> Job:
    return Job(job_id="j", queue="q", tenant_id=tenant, type="noop", payload=b"", created_at_ms=0,
               run_at_ms=0, attempt=0, max_attempts=3, timeout_s=30.0)  # fmt: skip


def diverter(burst: int, clock: Clock, overflow: bool = True) -> Diverter:
    """A diverter whose tenants refill (almost) never; no broker is ever asked."""
    return Diverter(
        settings=KafkaSettings(bootstrap="127.0.0.1:1"),
        gate=FloodGate(policy=FloodPolicy(burst=burst, rate=0.001), clock=clock),
        prefix="jobs",
        overflow_exists=lambda topic: overflow and topic == "jobs.q.overflow",
        wall_ms=lambda: 7_000,
        clock=clock,
        switch_wait_s=0.01,
    )


def test_the_diverter_sends_the_burst_to_the_ready_topic_then_the_rest_with_its_switch() -> None:
    router = diverter(3, Clock())
    routes = [router.route(job(), "jobs.q") for _ in range(3)]
    assert routes[0] is None, "a calm tenant's job goes to the ready topic, nothing noted"
    for route in routes[1:]:
        assert route is not None and (route.topic, route.headers) == ("jobs.q", ())
    last = routes[-1]
    assert last is not None
    last.future = Future()
    last.delivered(2, 99)  # the last ready record of the tenant landed at 2/99
    last.future.set_result("j")
    diverted = router.route(job(), "jobs.q")
    assert diverted is not None
    assert diverted.topic == "jobs.q.overflow"
    switch = read_switch(list(diverted.headers))
    assert switch is not None
    assert (switch.topic, switch.partition, switch.offset) == ("jobs.q", 2, 99)
    assert switch.deadline_ms == 7_000 + 30_000
    assert router.route(job("other"), "jobs.q") is None, "other tenants stay, untracked"


def test_without_an_overflow_topic_a_flood_stays_in_its_ready_topic() -> None:
    router = diverter(1, Clock(), overflow=False)
    routes = [router.route(job(), "jobs.q") for _ in range(3)]
    assert [r.topic for r in routes if r is not None] == ["jobs.q"] * 3


def test_a_flood_whose_last_ready_job_is_undelivered_stays_in_the_ready_topic_for_a_while() -> None:
    """Without its switch a diverted job could overtake the tenant's older ones."""
    clock = Clock()
    router = diverter(1, clock)
    pending: Future[str] = Future()  # the broker does not answer (yet)
    routes = [router.route(job(), "jobs.q")]
    first = routes[0]
    assert first is not None
    first.future = pending
    routes.append(router.route(job(), "jobs.q"))
    clock.now += POSTPONE_S - 0.1
    routes.append(router.route(job(), "jobs.q"))
    tracked = [r for r in routes if r is not None]
    assert [r.topic for r in tracked] == ["jobs.q"] * 3, "postponed, not asked again"
    for route in tracked:
        route.future = pending  # one answer for all three, for brevity
        route.delivered(0, 5)
    pending.set_result("j")
    clock.now += 0.2
    diverted = router.route(job(), "jobs.q")
    assert diverted is not None and diverted.topic == "jobs.q.overflow"


def test_the_switch_is_the_last_ready_job_that_landed_when_a_later_one_failed() -> None:
    router = diverter(3, Clock())
    assert router.route(job(), "jobs.q") is None  # a full bucket: not tracked
    landed, lost = router.route(job(), "jobs.q"), router.route(job(), "jobs.q")
    assert landed is not None and lost is not None
    first: Future[str] = Future()
    second: Future[str] = Future()
    landed.future = first
    lost.future = second
    landed.delivered(1, 10)
    first.set_result("j")
    second.set_exception(RuntimeError("message timed out"))
    diverted = router.route(job(), "jobs.q")
    assert diverted is not None
    switch = read_switch(list(diverted.headers))
    assert switch is not None
    assert (switch.partition, switch.offset) == (1, 10)


def test_only_a_tenant_past_half_its_burst_is_tracked() -> None:
    flood, _ = gate(burst=10, rate=0.001)
    lefts = [flood.take(KEY) for _ in range(11)]
    assert lefts[-1] == -1
    assert [flood.watched(left) for left in lefts[:-1]] == [False] * 5 + [True] * 5


def test_the_diverters_notes_keep_the_recent_tenants_only() -> None:
    """Tenant ids are unbounded (issue 36 item 5): the notes per (topic, tenant), the
    last ready record and the postponements, keep at most ``MAX_BUCKETS`` tenants
    besides those still in play, however many tenants one producer ever wrote."""
    clock = Clock()
    router = diverter(1, clock)
    for n in range(3 * MAX_BUCKETS):
        tenant = f"tenant-{n}"
        first = router.route(job(tenant), "jobs.q")
        assert first is not None
        first.future = Future()
        first.future.set_result("j")  # its only ready record landed
        second = router.route(job(tenant), "jobs.q")
        assert second is not None and second.topic == "jobs.q.overflow"
        router._gate.diversions.clear()  # its flood ended
        late = router.route(job(f"slow-{n}"), "jobs.q")
        assert late is not None and late.future is None  # still being produced...
        again = router.route(job(f"slow-{n}"), "jobs.q")
        assert again is not None and again.topic == "jobs.q"  # ...so its flood is postponed
        late.future = again.future = Future()
        late.future.set_exception(RuntimeError("message timed out"))  # later, it failed
        clock.now += POSTPONE_S / 100
    assert len(router._last_ready) <= 2 * MAX_BUCKETS
    assert len(router._postponed) <= MAX_BUCKETS + 100, "only postponements still running"
    assert len(router._marks) <= len(router._last_ready)


def test_a_diversion_ends_on_the_commit_of_the_group_jobs_group_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Leasekeepers in a group of their own (``serve --group``) commit there: a producer
    given the same ``JOBS_GROUP`` sees the flood drained, and one looking up another
    group would keep the tenant diverted for good."""
    monkeypatch.setenv(ENV_GROUP, "workers-{queue}")
    clock = Clock()
    with installed(Cluster()) as cluster:
        cluster.create_topic("jobs.q.overflow", 1)
        router = Diverter(
            settings=KafkaSettings(bootstrap="memory"),
            gate=FloodGate(policy=FloodPolicy(burst=4, rate=5.0), clock=clock),
            prefix="jobs",
            overflow_exists=lambda topic: topic == "jobs.q.overflow",
            wall_ms=lambda: 7_000,
            clock=clock,
            switch_wait_s=0.01,
        )
        try:
            for _ in range(10):
                route = router.route(job(), "jobs.q")
                if route is not None and route.topic == "jobs.q.overflow":
                    break
                if route is not None:
                    route.future = Future()
                    route.delivered(0, 3)
                    route.future.set_result("j")
            assert route is not None and route.topic == "jobs.q.overflow"
            route.future = Future()
            route.delivered(0, 4)
            route.future.set_result("j")
            clock.now += 10  # calm again: the way back is looked up
            cluster.commit("leasekeeper.jobs.q", {("jobs.q.overflow", 0): (5, None)})
            still = router.route(job(), "jobs.q")
            assert still is not None and still.topic == "jobs.q.overflow", "another group's commit"
            still.future = Future()
            still.delivered(0, 5)
            still.future.set_result("j")
            clock.now += 10
            cluster.commit("workers-q", {("jobs.q.overflow", 0): (6, None)})
            back = router.route(job(), "jobs.q")
            assert back is not None and back.topic == "jobs.q", "JOBS_GROUP's commit passed it"
        finally:
            router.close()


def test_a_bad_jobs_group_is_named_when_a_producer_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_GROUP, "lk-{tenant}")
    with pytest.raises(ValueError, match=r"invalid JOBS_GROUP 'lk-\{tenant\}': unknown field"):
        JobProducer(KafkaSettings(bootstrap="127.0.0.1:1"))
    assert queue_group("q", "jobs", "lk-{prefix}-{queue}") == "lk-jobs-q"
    assert queue_group("q", "jobs", "") == "leasekeeper.jobs.q"


def test_serve_refuses_a_bad_jobs_group_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_GROUP, "lk-{tenant}")
    result = CliRunner().invoke(serve_main, ["serve", "--queue", "q", "--state-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert result.output.startswith("Error: invalid JOBS_GROUP 'lk-{tenant}'"), result.output
    assert result.output.count("\n") == 1, result.output
