"""The control feed against real Kafka: tombstones, pruning at catch-up, start-up stats."""

from __future__ import annotations

from jobcore.control import Cancellation, DedupeClaim, dedupe_index_key
from jobcore.kafka import KafkaSettings, make_producer, produce_reliably
from jobcore.topics import QueueTopics
from leasekeeper.core.control_state import ControlState
from leasekeeper.kafka.control_feed import ControlFeed
from producer import ensure_queue_topics
from tests.system import wait_until

DAY_MS = 24 * 3600 * 1000
NOW_MS = 1_800_000_000_000


class FakeClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms / 1000


def claim(key: str, at_ms: int) -> DedupeClaim:
    return DedupeClaim(tenant_id="acme", dedupe_key=key, job_id=f"job-{key}", seen_at_ms=at_ms)


def write(kafka: KafkaSettings, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = make_producer(kafka)
    for key, value in records:
        produce_reliably(producer, topic, key=key, value=value)  # type: ignore[arg-type]
    assert producer.flush(30) == 0


def test_the_feed_prunes_stale_records_and_honours_tombstones(
    kafka: KafkaSettings, unique: str
) -> None:
    topics = QueueTopics(queue=f"q{unique}")
    ensure_queue_topics(kafka, topics.queue, partitions=1)
    stale = [claim(f"old{i}", NOW_MS - 2 * DAY_MS) for i in range(50)]
    fresh = [claim(f"new{i}", NOW_MS - 1000) for i in range(30)]
    write(kafka, topics.dedupe, [(c.key, c.encode()) for c in stale + fresh])
    write(kafka, topics.dedupe, [(fresh[0].key, None)])
    cancelled = [Cancellation(job_id=f"j{i}", cancelled_at_ms=NOW_MS - 1000) for i in range(3)]
    write(kafka, topics.control, [(c.key, c.encode()) for c in cancelled])
    write(kafka, topics.control, [(cancelled[0].key, None)])

    clock = FakeClock(NOW_MS)
    state = ControlState(dedupe_window_ms=DAY_MS)
    feed = ControlFeed(settings=kafka, topics=topics, state=state, clock=clock)
    try:
        feed.catch_up()
        snap = feed.snapshot()
        assert (snap.cancellations, snap.dedupe_claims) == (2, 29)
        assert snap.catch_up_records == 85
        assert snap.catch_up_s is not None and snap.catch_up_s >= 0
        assert dedupe_index_key("acme", "new0") not in state.claims
        assert not state.is_cancelled("j0") and state.is_cancelled("j1")

        write(kafka, topics.control, [(cancelled[1].key, None)])
        clock.now_ms = NOW_MS + DAY_MS  # every fresh claim is now past the window

        def applied() -> bool:
            feed.poll()
            return state.sizes() == (1, 0)

        wait_until(applied, 30, "the tombstone and the pruning to apply")
        assert feed.snapshot().pruned == 29
    finally:
        feed.close()
