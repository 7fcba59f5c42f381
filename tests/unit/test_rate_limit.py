"""Rate limits (issue 18, part 2): the token bucket, the flags, and the engine's claim
path with a fake clock: jobs over a limit wait (never fail, no attempt spent), other
types go on, and a limited backlog beyond its share of the window is parked."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from leasekeeper.core.copies import CopyKind
from leasekeeper.core.leases import TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.limits.admission import HORIZONS_KEPT
from leasekeeper.limits.rate_limit import (
    MIN_HOLD,
    RateLimitConfig,
    RateLimits,
    TokenBucket,
    parse_rate,
    rate_limit_config,
)
from leasekeeper.ops.cli import main
from schemas.job import Job

TP = TopicPart("jobs.q", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def job(i: int, kind: str = "sms", tenant: str = "t1") -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id=tenant, type=kind, payload=b"",
               created_at_ms=i)  # fmt: skip


def engine_with(path: Path, clock: Clock, limits: RateLimitConfig, **cfg: int) -> LeaseEngine:
    config = EngineConfig(lease_s=10, rate_limits=limits, **cfg)  # type: ignore[arg-type]
    engine = LeaseEngine(store=LeaseStore(path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, -1001)
    return engine


# -- the bucket and the flags ------------------------------------------------------


def test_parse_rate_units() -> None:
    assert parse_rate("100/s", "--rate-limit").per_s == 100
    assert parse_rate("600/m", "--rate-limit").per_s == 10
    assert parse_rate("36/h", "--rate-limit").per_s == pytest.approx(0.01)
    assert parse_rate("0.5/s", "--rate-limit").burst == 1.0, "a bucket holds one job at least"


@pytest.mark.parametrize("text", ["100", "0/s", "-1/s", "10/d", "ten/s", "", "1e3/s", "nan/s"])
def test_a_bad_rate_is_one_line_naming_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match=r"--tenant-rate-limit .*expected a rate N/s") as err:
        rate_limit_config(tenant=text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["sms", "=100/s", "sms=", "sms=100/x"])
def test_a_bad_pair_names_its_flag_and_value(value: str) -> None:
    with pytest.raises(ValueError, match=rf"^--rate-limit '{value}': expected TYPE=RATE"):
        rate_limit_config(by_type=[value])
    with pytest.raises(ValueError, match=rf"^--tenant-rate-limit-for '{value}': expected TENANT="):
        rate_limit_config(tenant_for=[value])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate-limit", "sms=fast"], "Error: --rate-limit 'sms=fast': expected TYPE=RATE"),
        (["--tenant-rate-limit", "0/s"], "Error: --tenant-rate-limit '0/s': expected a rate"),
        (["--ready-target", "urgent=2s"], "Error: --ready-target 'urgent=2s': expected CLASS="),
        (["--ready-target", "bulk=soon"], "Error: --ready-target 'bulk=soon': expected a dur"),
    ],
)
def test_serve_refuses_a_bad_limit_in_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(
        main, ["serve", "--queue", "q", "--state-dir", str(tmp_path), *args]
    )
    assert result.exit_code != 0
    assert result.output.startswith(message) and result.output.count("\n") == 1, result.output


def test_the_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(per_s=10, burst=10, now=0.0)
    for _ in range(10):
        assert bucket.ready()
        bucket.take()
    assert not bucket.ready()
    assert bucket.wait_s() == pytest.approx(0.1)
    bucket.refill(0.25)
    assert bucket.tokens == pytest.approx(2.5)
    bucket.refill(100.0)
    assert bucket.tokens == 10, "never more than one burst"
    bucket.refill(50.0)  # a clock going back adds nothing
    assert bucket.tokens == 10


def test_the_share_scales_type_rates_and_leaves_tenant_rates_whole() -> None:
    clock = Clock()
    limits = RateLimits(rate_limit_config(by_type=["sms=100/s"], tenant="20/s"), clock)
    limits.set_share(0.25)
    assert limits.type_rate("sms") == 25
    assert limits.tenant_rate("acme") == 20, "a tenant's jobs are all on its own partition"
    (view,) = [v for v in limits.views({}, {}) if v.kind == "type"]
    assert (view.limit, view.rate_per_s, view.tokens) == ("100/s", 25, 25)


# -- at claim time -----------------------------------------------------------------


def test_jobs_over_the_limit_wait_and_others_go_on(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_with(tmp_path, clock, rate_limit_config(by_type=["sms=5/s"]))
    for i in range(8):
        engine.fetch.offer(TP, i, job(i), b"x")
    engine.fetch.offer(TP, 8, job(8, kind="mail"), b"x")
    grants = engine.workers.claim("w", 20, wait_s=0)
    assert len(grants) == 6, "a burst of 5 sms, and the mail job beside them"
    assert "jobs.q/0/8" in {g.lease_id for g in grants}
    assert engine.workers.claim("w", 20, wait_s=0) == [], "no token: the rest waits"
    clock.now += 0.4
    assert len(engine.workers.claim("w", 20, wait_s=0)) == 2, "0.4 s at 5/s is two tokens"
    assert engine.counters.dead == 0 and engine.counters.retried == 0
    assert engine.copies.take() == [], "nothing failed, nothing copied"


def test_dispatches_over_a_window_stay_at_the_rate(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_with(tmp_path, clock, rate_limit_config(by_type=["sms=10/s"]))
    for i in range(300):
        engine.fetch.offer(TP, i, job(i), b"x")
    dispatched = 0
    for _ in range(200):  # 20 s in steps of 0.1 s
        dispatched += len(engine.workers.claim("w", 50, wait_s=0))
        clock.now += 0.1
    assert dispatched <= 10 * 20 + 10, "the rate over 20 s, plus one burst"
    assert dispatched >= 10 * 20 - 1


def test_a_tenant_limit_holds_that_tenant_only(tmp_path: Path) -> None:
    clock = Clock()
    limits = rate_limit_config(tenant="2/s", tenant_for=["big=4/s"])
    engine = engine_with(tmp_path, clock, limits)
    for i in range(30):
        engine.fetch.offer(TP, i, job(i, tenant=("small", "big", "other")[i % 3]), b"x")
    grants = engine.workers.claim("w", 30, wait_s=0)
    assert len(grants) == 2 + 4 + 2
    (view,) = [v for v in engine.limits.snapshot().limiters if v.key == "big"]  # type: ignore[union-attr]
    assert (view.kind, view.limit, view.waiting, view.dispatched) == ("tenant", "4/s", 6, 4)


def test_a_claim_waits_for_the_next_token_instead_of_answering_empty(tmp_path: Path) -> None:
    clock = Clock()
    waits: list[float] = []

    def sleep(cond: threading.Condition, timeout: float) -> bool:
        waits.append(timeout)
        clock.now += timeout  # the time passes as the claimer sleeps
        return cond.wait(0)

    config = EngineConfig(lease_s=10, rate_limits=rate_limit_config(by_type=["sms=1/s"]))
    engine = LeaseEngine(
        store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock, sleep=sleep
    )
    engine.partitions.assign(TP, -1001)
    engine.fetch.offer(TP, 0, job(0), b"x")
    engine.fetch.offer(TP, 1, job(1), b"x")
    assert len(engine.workers.claim("w", 5, wait_s=0)) == 1
    assert waits == []
    assert len(engine.workers.claim("w", 5, wait_s=3)) == 1
    assert waits and max(waits) <= 1.0, "slept until the next token, not the whole poll"


def test_inspect_shows_each_limiter(tmp_path: Path) -> None:
    clock = Clock()
    limits = rate_limit_config(by_type=["sms=5/s", "fax=1/m"])
    engine = engine_with(tmp_path, clock, limits)
    assert engine_with(tmp_path / "none", clock, RateLimitConfig()).limits.snapshot() is None
    for i in range(7):
        engine.fetch.offer(TP, i, job(i), b"x")
    engine.workers.claim("w", 10, wait_s=0)
    snap = engine.limits.snapshot()
    assert snap is not None
    views = {v.key: v for v in snap.limiters}
    assert (views["sms"].tokens, views["sms"].waiting, views["sms"].dispatched) == (0, 2, 5)
    assert (views["fax"].limit, views["fax"].tokens) == ("1/m", 1)


# -- the window ------------------------------------------------------------------


def test_a_limited_backlog_beyond_its_share_is_parked_without_an_attempt(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_with(tmp_path, clock, rate_limit_config(by_type=["sms=1/s"]),
                         window_records=1000)  # fmt: skip
    for i in range(100):
        engine.fetch.offer(TP, i, job(i), b"x")
    engine.fetch.offer(TP, 100, job(100, kind="mail"), b"x")
    assert engine.limits.park_excess() == 100 - MIN_HOLD
    copies = engine.copies.take()
    assert {c.kind for c in copies} == {CopyKind.PARK}, "parked through a delay tier"
    assert all(c.job is not None and c.job.attempt == 0 and not c.job.errors for c in copies)
    delays = [c.delay_s for c in sorted(copies, key=lambda c: c.offset)]
    assert delays == sorted(delays) and delays[0] >= MIN_HOLD, "each comes back in its turn"
    assert min(c.offset for c in copies) == MIN_HOLD, "the oldest stay in the window"
    snap = engine.views.snapshot()
    assert snap.ready == MIN_HOLD + 1
    for copy in copies:
        engine.copies.delivered(copy)
    assert engine.counters.retried == 0 and engine.counters.dead == 0
    grants = engine.workers.claim("w", 50, wait_s=0)
    assert len(grants) == 2, "one sms token, and the mail job is not held back"
    (view,) = engine.limits.snapshot().limiters  # type: ignore[union-attr]
    assert view.parked == 100 - MIN_HOLD


def test_nothing_is_parked_without_limits(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_with(tmp_path, clock, RateLimitConfig())
    for i in range(100):
        engine.fetch.offer(TP, i, job(i), b"x")
    assert engine.limits.park_excess() == 0
    assert len(engine.workers.claim("w", 200, wait_s=0)) == 100


def test_the_share_follows_the_partitions_owned(tmp_path: Path) -> None:
    clock = Clock()
    engine = engine_with(tmp_path, clock, rate_limit_config(by_type=["sms=40/s"]))
    engine.limits.queue_partitions(frozenset({"jobs.q", "jobs.q.retry.1s"}), 2)  # holds 1 of 4
    for i in range(40):
        engine.fetch.offer(TP, i, job(i), b"x")
    assert len(engine.workers.claim("w", 40, wait_s=0)) == 10
    snap = engine.limits.snapshot()
    assert snap is not None and snap.share == 0.25


def test_parked_jobs_take_the_next_free_slots_and_the_newest_are_parked(
    tmp_path: Path,
) -> None:
    clock = Clock()
    engine = engine_with(tmp_path, clock, rate_limit_config(by_type=["sms=1/s"]),
                         window_records=1000)  # fmt: skip
    for i in range(30):
        engine.fetch.offer(TP, i, job(i), b"x")
    assert engine.limits.park_excess() == 20
    first = sorted(c.delay_s for c in engine.copies.take())
    assert first == [10.0 + n for n in range(20)], "after the 10 kept, one slot a second"
    for _ in range(10):  # the kept ones go out at the limit
        clock.now += 1
        assert len(engine.workers.claim("w", 5, wait_s=0)) == 1
    back = job(25)  # a parked job back from its tier, older than what came meanwhile
    engine.fetch.offer(TP, 30, back, b"x")
    for i in range(31, 45):
        engine.fetch.offer(TP, i, job(100 + i), b"x")
    assert engine.limits.park_excess() == 5
    second = engine.copies.take()
    assert {c.job.job_id for c in second if c.job} == {f"job-{n}" for n in range(140, 145)}
    assert min(c.delay_s for c in second) == 20.0, "behind every job parked before"


def test_a_leasekeeper_with_no_share_parks_nothing_and_loses_nothing(tmp_path: Path) -> None:
    """At share 0 every rate is 0: parking has no slot to give, so the jobs must stay
    in the window, not be taken out and then neither parked nor run."""
    clock = Clock()
    engine = engine_with(tmp_path, clock, rate_limit_config(by_type=["sms=1/s"]))
    engine.limits.queue_partitions(frozenset({"jobs.other"}), 1)  # owns none of them: share 0
    for i in range(30):
        engine.fetch.offer(TP, i, job(i), b"x")
    assert engine.limits.park_excess() == 0
    assert engine.views.snapshot().ready == 30, "every job still in the window"
    engine.limits.queue_partitions(frozenset({"jobs.q"}), 1)  # the share comes back
    clock.now += 60
    assert len(engine.workers.claim("w", 5, wait_s=0)) == 1


def test_parking_horizons_of_tenants_long_gone_are_forgotten(tmp_path: Path) -> None:
    """One horizon per tenant ever parked would grow with uptime (design invariant 11)."""
    clock = Clock()
    engine = engine_with(tmp_path, clock, rate_limit_config(tenant="1/s"),
                         window_records=20_000)  # fmt: skip
    tenants = HORIZONS_KEPT + 100
    offset = 0
    for t in range(tenants):
        for _ in range(MIN_HOLD + 1):
            engine.fetch.offer(TP, offset, job(offset, tenant=f"t{t}"), b"x")
            offset += 1
    assert engine.limits.park_excess() == tenants, "one job of each tenant over its hold"
    assert len(engine._limits._horizon) == tenants
    clock.now += 3600  # every parked job came back and ran long ago
    engine.limits.park_excess()
    assert engine._limits._horizon == {}
