"""What the consumer loop asks the engine on every turn, kept as it changes.

``over_span`` (partitions fetched so far beyond their commit that its metadata could
not describe them) and ``copying`` (partitions with too many copies on the way) used
to be found by going over every partition on every turn of the loop; a queue has a
hundred delay-tier partitions, nearly all idle. They are now kept as fetches, acks and
copies change them. These tests hold them to the full scan's answer after any
sequence of fetches, acks, moves, tier hops and deliveries.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from leasekeeper.core.copies import CopyKind, CopyRequest
from leasekeeper.core.leases import SettleKind, Settlement, TopicPart
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from schemas.job import Job

PARTS = [TopicPart("jobs.q", 0), TopicPart("jobs.q", 1), TopicPart("jobs.q.retry.1m", 0)]
MAX_SPAN = 6


def _job(n: int) -> Job:
    return Job(job_id=f"j-{n}", queue="q", tenant_id=f"t{n % 2}", type="noop", payload=b"",
               created_at_ms=n)  # fmt: skip


def _engine(path: Path) -> LeaseEngine:
    config = EngineConfig(lease_s=30, max_span=MAX_SPAN, window_records=1_000, overflow_share=0.5)
    engine = LeaseEngine(store=LeaseStore(path), config=config)
    for tp in PARTS:
        engine.partitions.assign(tp, 0)
    return engine


def _scanned_over_span(engine: LeaseEngine) -> set[TopicPart]:
    """The definition, over every partition."""
    return {
        tp
        for tp, s in engine._book.parts.items()
        if s.tracker.highest_fetched - s.tracker.committable >= MAX_SPAN - 1
    }


def _scanned_copying(engine: LeaseEngine, limit: int, unsaved: int) -> set[TopicPart]:
    return {
        tp
        for tp, s in engine._book.parts.items()
        if s.copies_in_flight >= limit or engine._overflow.unsaved(tp) >= unsaved
    }


class _Model:
    """Drives one engine through the operations a loop and its workers perform."""

    def __init__(self, engine: LeaseEngine) -> None:
        self.engine = engine
        self.next_offset = dict.fromkeys(PARTS, 0)
        self.grants: list[tuple[str, str]] = []
        self.copies: list[CopyRequest] = []
        self.n = 0

    def fetch(self, part: int, count: int) -> None:
        tp = PARTS[part]
        for _ in range(count):
            offset = self.next_offset[tp]
            self.next_offset[tp] += 1
            self.n += 1
            self.engine.fetch.offer(tp, offset, _job(self.n), b"x")

    def fetch_unoffered(self, part: int) -> None:
        """A record that is copied, not dispatched (a tier hop)."""
        tp = PARTS[part]
        offset = self.next_offset[tp]
        self.next_offset[tp] += 1
        generation = self.engine.fetch.track_unoffered(tp, offset)
        if generation is not None:
            self.n += 1
            hop = CopyRequest(kind=CopyKind.HOP, source=tp, offset=offset,
                              generation=generation, job=_job(self.n), tier="1s")  # fmt: skip
            self.engine.copies.add(hop)

    def claim(self, count: int) -> None:
        self.grants += [(g.lease_id, g.token) for g in self.engine.workers.claim("w", count, 0)]

    def ack(self, index: int) -> None:
        if self.grants:
            lease, token = self.grants.pop(index % len(self.grants))
            self.engine.workers.settle(
                [Settlement(lease_id=lease, token=token, outcome=SettleKind.ACK)]
            )

    def move_floods(self) -> None:
        self.engine.overflow.floods({PARTS[0], PARTS[1]}, 2)

    def take(self) -> None:
        self.copies += self.engine.copies.take()

    def deliver(self, index: int) -> None:
        if self.copies:
            self.engine.copies.delivered(self.copies.pop(index % len(self.copies)), at=0)

    def commit(self) -> None:
        self.engine.commits.committed(self.engine.commits.commit_positions())

    def move(self, part: int) -> None:
        """The partition leaves and comes back (a rebalance)."""
        tp = PARTS[part]
        self.engine.partitions.revoke(tp)
        self.engine.partitions.assign(tp, 0)
        self.next_offset[tp] = 0


_step = st.one_of(
    st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(1, 4)),
    st.tuples(st.just("fetch_unoffered"), st.integers(0, 2)),
    st.tuples(st.just("claim"), st.integers(1, 5)),
    st.tuples(st.just("ack"), st.integers(0, 50)),
    st.tuples(st.just("move_floods")),
    st.tuples(st.just("take")),
    st.tuples(st.just("deliver"), st.integers(0, 50)),
    st.tuples(st.just("commit")),
    st.tuples(st.just("move"), st.integers(0, 2)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_step, max_size=60))
def test_the_kept_answers_equal_the_full_scan_after_any_sequence(
    steps: list[tuple[object, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as path:
        engine = _engine(Path(path))
        model = _Model(engine)
        for name, *args in steps:
            getattr(model, str(name))(*args)
            assert engine.commits.over_span() == _scanned_over_span(engine), name
            for limit, unsaved in ((1, 1), (2, 3), (4, 1)):
                assert engine.overflow.copying(limit, unsaved) == _scanned_copying(
                    engine, limit, unsaved
                )


def test_a_partition_fetched_to_its_span_is_over_it_until_its_commit_catches_up(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path)
    model = _Model(engine)
    model.fetch(0, MAX_SPAN - 1)
    assert engine.commits.over_span() == set()
    model.fetch(0, 1)
    assert engine.commits.over_span() == {PARTS[0]}
    model.claim(1)
    model.ack(0)  # the first offset: the commit moves up by one
    assert engine.commits.over_span() == set()
    model.fetch(1, MAX_SPAN)
    model.fetch_unoffered(0)  # a hop's source counts as fetched too
    assert engine.commits.over_span() == {PARTS[0], PARTS[1]}
    model.move(1)
    assert engine.commits.over_span() == {PARTS[0]}


def test_a_partition_with_copies_on_the_way_is_copying_until_they_are_delivered(
    tmp_path: Path,
) -> None:
    engine = _engine(tmp_path)
    model = _Model(engine)
    model.fetch_unoffered(2)
    model.fetch_unoffered(2)
    model.take()
    assert engine.overflow.copying(2, 100) == {PARTS[2]}
    model.deliver(0)
    assert engine.overflow.copying(2, 100) == set()
    assert engine.overflow.copying(1, 100) == {PARTS[2]}
    model.deliver(0)
    assert engine.overflow.copying(1, 100) == set()


def test_a_partition_whose_delivered_moves_are_in_no_commit_is_copying_until_one_lands(
    tmp_path: Path,
) -> None:
    """Moves to the overflow lane, all delivered (none on the way any more), still count
    until a commit describes them: a move now would copy them again."""
    engine = _engine(tmp_path)
    model = _Model(engine)
    model.fetch(0, 4)
    model.move_floods()
    model.take()
    assert model.copies and all(c.kind is CopyKind.OVERFLOW for c in model.copies)
    while model.copies:
        model.deliver(0)
    assert engine.overflow.copying(1_000, 1) == {PARTS[0]}
    model.commit()
    assert engine.overflow.copying(1_000, 1) == set()
