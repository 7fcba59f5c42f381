"""The breakers inside the lease engine: jobs of an open type are parked (copied to a
delay tier without spending an attempt, resolved on delivery), other types run on."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.plain import plain
from jobcore.topics import QueueTopics
from leasekeeper.breaker.feed import BreakerRecord, operator_record
from leasekeeper.breaker.settings import BreakerRule, BreakerSettings
from leasekeeper.breaker.states import BreakerState
from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import Grant, SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.kafka.router import KafkaRouter
from leasekeeper.views.inspect_view import breaker_lines
from leasekeeper.views.metrics import EngineCollector
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.vocabulary import ErrorClass

TP = TopicPart("jobs.q", 0)
RULE = BreakerRule(rate=0.5, min_calls=4, window_s=30)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def job(i: int, job_type: str, attempt: int = 0) -> Job:
    return Job(job_id=f"job-{i}", queue="q", tenant_id="t", type=job_type, payload=b"",
               created_at_ms=0, attempt=attempt, max_attempts=3)  # fmt: skip


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def engine(tmp_path: Path, clock: Clock) -> LeaseEngine:
    breakers = BreakerSettings(default=None, by_type={"mail": RULE}, cooldown_s=10, probes=1)
    config = EngineConfig(lease_s=10, breakers=breakers)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=config, clock=clock, monotonic=clock)
    engine.partitions.assign(TP, 0)
    return engine


def nack(grant: Grant, error_class: str = "SMTPError", **kw: object) -> Settlement:
    return Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.NACK,
                      error_class=error_class, **kw)  # type: ignore[arg-type]  # fmt: skip


def ack(grant: Grant) -> Settlement:
    return Settlement(lease_id=grant.lease_id, token=grant.token, outcome=SettleKind.ACK)


def of(copies: list[CopyRequest], kind: CopyKind) -> list[CopyRequest]:
    return [c for c in copies if c.kind is kind]


def open_mail(engine: LeaseEngine, first: int = 0) -> list[CopyRequest]:
    """Four failed calls of ``mail``: the breaker opens. Returns the copies so far."""
    for i in range(first, first + 4):
        engine.fetch.offer(TP, i, job(i, "mail"), b"x")
    grants = engine.workers.claim("w", 4, 0, frozenset({"mail"}))
    assert len(grants) == 4
    engine.workers.settle([nack(g) for g in grants])
    return engine.copies.take()


def test_an_open_breaker_parks_ready_jobs_of_its_type_without_an_attempt(
    engine: LeaseEngine, clock: Clock
) -> None:
    retries = open_mail(engine)
    engine.fetch.offer(TP, 4, job(4, "mail", attempt=1), b"x")
    engine.fetch.offer(TP, 5, job(5, "thumbs"), b"x")
    engine.fetch.promote_due()  # every loop turn: jobs of an open type leave the window
    parked = of(engine.copies.take(), CopyKind.PARK)
    assert [c.offset for c in parked] == [4]
    assert parked[0].job is not None and parked[0].job.attempt == 1  # not spent
    # The rest of the cool-down (10 s), plus a spread of up to one cool-down.
    assert 10 <= parked[0].delay_s <= 20
    assert parked[0].job.run_at_ms == int(clock.now * 1000) + int(parked[0].delay_s * 1000)
    # The other type runs at once; nothing of mail is handed out.
    grants = engine.workers.claim("w", 10, 0)
    assert [g.lease_id for g in grants] == [TP.lease_id(5)]
    assert engine.counters.parked == 1
    # Copy, then resolve: the offset resolves only when the parked copy is delivered.
    engine.workers.settle([ack(grants[0])])
    for request in retries + engine.copies.take():
        engine.copies.delivered(request)
    assert engine.commits.commit_positions()[TP][0] == 4  # held by the parked offset
    engine.copies.delivered(parked[0])
    assert engine.commits.commit_positions()[TP][0] == 6


def test_a_claim_of_an_open_type_parks_instead_of_leasing(engine: LeaseEngine) -> None:
    retries = of(open_mail(engine), CopyKind.RETRY)
    assert len(retries) == 4  # the failed calls themselves retry as usual
    engine.fetch.offer(TP, 4, job(4, "mail"), b"x")
    assert engine.workers.claim("w", 1, 0, frozenset({"mail"})) == []
    parked = of(engine.copies.take(), CopyKind.PARK)
    assert [c.offset for c in parked] == [4]


def test_half_open_probes_then_closes(engine: LeaseEngine, clock: Clock) -> None:
    open_mail(engine)
    clock.now += 10
    engine.fetch.offer(TP, 4, job(4, "mail"), b"x")
    engine.fetch.offer(TP, 5, job(5, "mail"), b"x")
    probe = engine.workers.claim("w", 1, 0)
    assert len(probe) == 1  # one probe
    engine.fetch.promote_due()
    assert [c.offset for c in of(engine.copies.take(), CopyKind.PARK)] == [5]
    assert engine.breakers.views()[0].state is BreakerState.HALF_OPEN
    engine.workers.settle([ack(probe[0])])
    assert engine.breakers.views()[0].state is BreakerState.CLOSED
    transitions = engine.breakers.transitions()
    assert [t.state for t in transitions] == [BreakerState.OPEN, BreakerState.CLOSED]


def test_dependency_down_opens_at_once_and_permanent_errors_do_not_count(
    engine: LeaseEngine,
) -> None:
    for i in range(5):
        engine.fetch.offer(TP, i, job(i, "mail"), b"x")
    grants = engine.workers.claim("w", 5, 0)
    engine.workers.settle([nack(g, permanent=True) for g in grants[:4]])
    assert engine.breakers.views()[0].state is BreakerState.CLOSED
    engine.workers.settle([nack(grants[4], ErrorClass.DEPENDENCY_DOWN.value, retry_after_s=60)])
    view = engine.breakers.views()[0]
    assert view.state is BreakerState.OPEN
    assert view.cooldown_s == 60


def test_expired_leases_count_as_failures(engine: LeaseEngine, clock: Clock) -> None:
    for i in range(4):
        engine.fetch.offer(TP, i, job(i, "mail"), b"x")
    assert len(engine.workers.claim("w", 4, 0)) == 4
    clock.now += 11  # past the lease
    assert engine.workers.expire() == 4
    assert engine.breakers.views()[0].state is BreakerState.OPEN


def test_published_and_operator_states_are_adopted(engine: LeaseEngine, clock: Clock) -> None:
    held = operator_record("thumbs", open_=True, reason="maintenance", at_ms=1)
    record = BreakerRecord.decode(held.encode())
    assert record == held
    engine.breakers.adopt(record.job_type, state=record.state, until_ms=record.until_ms,
                         cooldown_s=record.cooldown_s, trips=record.trips, forced=record.forced,
                         reason=record.reason)  # fmt: skip
    engine.fetch.offer(TP, 0, job(0, "thumbs"), b"x")
    assert engine.workers.claim("w", 1, 0) == []
    assert [c.offset for c in of(engine.copies.take(), CopyKind.PARK)] == [0]
    # Open elsewhere until 5 s from now: half-open here then too.
    until_ms = int(clock.now * 1000) + 5000
    engine.breakers.adopt("mail", state=BreakerState.OPEN, until_ms=until_ms, cooldown_s=10,
                         trips=1, forced=False, reason="elsewhere")  # fmt: skip
    assert engine.breakers.views()[0].state is BreakerState.OPEN
    clock.now += 5
    assert engine.breakers.views()[0].state is BreakerState.HALF_OPEN


def test_inspect_and_metrics_show_each_breaker(engine: LeaseEngine) -> None:
    open_mail(engine)
    engine.fetch.offer(TP, 4, job(4, "mail"), b"x")
    engine.fetch.promote_due()
    views = [plain(b) for b in engine.breakers.views()]
    snapshot = {"breakers": views}
    (line,) = breaker_lines(snapshot)
    assert "mail: open" in line and "100% of 4 calls" in line and "next probe in 10s" in line
    full = {"counters": {}, "ready": 0, "partitions": [], **snapshot}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in EngineCollector(lambda: full, "q").collect()
        for s in family.samples
    }
    mail = (("job_type", "mail"), ("queue", "q"))
    assert samples[("leasekeeper_breaker_state", mail)] == 2  # 2 is open, as the alerts read
    assert samples[("leasekeeper_breaker_parked_total", mail)] == 1
    assert samples[("leasekeeper_breaker_failure_rate", mail)] == 1.0


def test_parked_copies_go_to_the_tier_of_their_delay(engine: LeaseEngine) -> None:
    open_mail(engine)
    engine.fetch.offer(TP, 4, job(4, "mail"), b"x")
    engine.fetch.promote_due()
    (parked,) = of(engine.copies.take(), CopyKind.PARK)
    codec = EnvelopeCodec(SchemaRegistry())
    router = KafkaRouter(codec=codec, topics=QueueTopics(queue="q"), tiers=DelayTiers())
    record = router.record(parked)
    assert record.topic == "jobs.q.retry.10s"
    assert codec.decode(record.value).attempt == 0
