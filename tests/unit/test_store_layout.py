"""The lease store keeps one value per job, replaced at each state change, and still
reads (and forgets) stores written in the layout before it."""

from __future__ import annotations

import json
from pathlib import Path

from rocksdict import Options, Rdict

from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore, StoreBatch
from leasekeeper.core.store_values import Resolution
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job

TP = TopicPart("jobs.q", 0)


class _CountingStore(LeaseStore):
    """Counts the operations of each batch written."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[int] = []

    def write(self, batch: StoreBatch) -> None:
        if len(batch):
            self.writes.append(len(batch))
        super().write(batch)


def _job(n: int) -> Job:
    return Job(job_id=f"j{n}", queue="q", tenant_id="t", type="noop", payload=b"",
               created_at_ms=0)  # fmt: skip


def _engine(store: LeaseStore) -> LeaseEngine:
    engine = LeaseEngine(store=store, config=EngineConfig(lease_s=10))
    engine.partitions.assign(TP, 0)
    return engine


def test_claim_heartbeat_ack_and_nack_are_one_stored_value_each(tmp_path: Path) -> None:
    store = _CountingStore(tmp_path)
    engine = _engine(store)
    for n in range(4):
        engine.fetch.offer(TP, n, _job(n), b"x")
    grants = engine.workers.claim("w", 4, wait_s=0)
    engine.workers.heartbeat([(g.lease_id, g.token) for g in grants])
    acks = [
        Settlement(lease_id=g.lease_id, token=g.token, outcome=SettleKind.ACK) for g in grants[:3]
    ]
    engine.workers.settle([*acks, Settlement(lease_id=grants[3].lease_id, token=grants[3].token,
                                     outcome=SettleKind.NACK)])  # fmt: skip
    assert store.writes == [4, 4, 4]  # claim, heartbeat, settle: one value per job


def test_a_restart_reads_each_jobs_one_value(tmp_path: Path) -> None:
    store = LeaseStore(tmp_path)
    engine = _engine(store)
    for n in range(3):
        engine.fetch.offer(TP, n, _job(n), b"x")
    acked, leased, released = engine.workers.claim("w", 3, wait_s=0)
    engine.workers.settle(
        [Settlement(lease_id=acked.lease_id, token=acked.token, outcome=SettleKind.ACK)]
    )
    engine.workers.settle([Settlement(lease_id=released.lease_id, token=released.token,
                              outcome=SettleKind.RELEASE)])  # fmt: skip
    store.close()
    memory = LeaseStore(tmp_path).load(TP.topic, TP.partition, 0)
    by_offset = {int(g.lease_id.rsplit("/", 1)[1]): g for g in (acked, leased, released)}
    acked_at = next(o for o, g in by_offset.items() if g is acked)
    leased_at = next(o for o, g in by_offset.items() if g is leased)
    released_at = next(o for o, g in by_offset.items() if g is released)
    assert memory.resolved == {acked_at: Resolution.ACKED}
    assert memory.claims == {leased_at: 1, released_at: 0}
    lease = memory.leases[leased_at]
    assert (lease.token, lease.worker, lease.attempt) == (leased.token, "w", 1)
    assert lease.until_ms == leased.until_ms


def _legacy_store(path: Path) -> None:
    """A store as the leasekeeper wrote it before one value per job: a key each for
    the resolution, the claims and the lease, offsets as 20 decimal digits."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options)

    def key(kind: str, offset: int) -> bytes:
        return f"{kind}/{TP.topic}/{TP.partition}/{offset:020d}".encode()

    db.put(key("r", 0), b"acked")
    db.put(key("c", 1), b"2")
    db.put(key("c", 2), b"1")
    db.put(key("l", 2), json.dumps(["tok", "w-old", 3, 1000, 99_000]).encode())
    db.put(key("r", 5), b"retried")
    db.close()


def test_a_store_of_the_old_layout_is_read_and_forgotten_below_commits(tmp_path: Path) -> None:
    _legacy_store(tmp_path)
    store = LeaseStore(tmp_path)
    assert store.legacy
    memory = store.load(TP.topic, TP.partition, 0)
    assert memory.resolved == {0: Resolution.ACKED, 5: Resolution.RETRIED}
    assert memory.claims == {1: 2, 2: 1}
    assert memory.leases[2].token == "tok" and memory.leases[2].attempt == 3
    batch = store.batch()
    batch.claims(TP.topic, TP.partition, 1, 3)  # a new value wins over the old keys
    store.write(batch)
    assert store.load(TP.topic, TP.partition, 0).claims == {1: 3, 2: 1}
    batch = store.batch()
    batch.forget_below(TP.topic, TP.partition, 3, legacy=store.legacy)
    store.write(batch)
    assert store.load(TP.topic, TP.partition, 0).resolved == {5: Resolution.RETRIED}
    assert store.load(TP.topic, TP.partition, 0).claims == {}


def test_an_engine_on_an_old_store_skips_what_was_acked_and_honours_old_leases(
    tmp_path: Path,
) -> None:
    _legacy_store(tmp_path)
    engine = LeaseEngine(store=LeaseStore(tmp_path), config=EngineConfig(lease_s=10))
    engine.partitions.assign(TP, 0)
    for n in range(3):
        engine.fetch.offer(TP, n, _job(n), b"x")
    assert engine.counters.skipped == 1  # offset 0 was acked
    (grant,) = engine.workers.claim("w", 10, wait_s=0)
    assert grant.lease_id == "jobs.q/0/1" and grant.attempt == 3  # two claims before
    answer = engine.workers.settle(
        [Settlement(lease_id="jobs.q/0/2", token="tok", outcome=SettleKind.ACK)]
    )
    assert answer[0].ok
