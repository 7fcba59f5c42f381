"""A lane topic created after the leasekeeper started is read without a restart (N17):
the feed looks for a missing topic again, at each assignment and every ``RECHECK_S``
while polling, instead of deciding once for the process's life."""

from __future__ import annotations

from typing import Any

import pytest

from jobcore.kafka import KafkaSettings
from leasekeeper.ordering_lane import RECHECK_S, LaneFeed
from schemas.codec import EnvelopeCodec, SchemaRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeConsumer:
    def __init__(self) -> None:
        self.assigned: list[Any] = []
        self.consumed = 0

    def assign(self, tps: list[Any]) -> None:
        self.assigned.extend(tps)

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.consumed += 1
        return []

    def close(self) -> None:
        pass


def feed_with(exists: list[bool], clock: Clock, monkeypatch: pytest.MonkeyPatch) -> LaneFeed:
    feed = LaneFeed(settings=KafkaSettings(bootstrap="127.0.0.1:9", client_id="t"),
                    topic="jobs.q.ordering", codec=EnvelopeCodec(SchemaRegistry()),
                    on_operator=lambda tp, seq, entry: None, monotonic=clock)  # fmt: skip
    feed._consumer.close()
    feed._consumer = FakeConsumer()  # type: ignore[assignment]
    calls = iter(exists)

    def exists_now() -> bool:
        feed._checked_at = clock()
        found = next(calls)
        feed.missing = not found
        return found

    monkeypatch.setattr(feed, "_exists", exists_now)
    return feed


def test_polling_finds_a_lane_topic_created_later(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    feed = feed_with([False, False, True], clock, monkeypatch)
    feed.catch_up()
    assert feed.missing
    consumer = feed._consumer
    assert isinstance(consumer, FakeConsumer)
    feed.poll()  # too soon to look again
    assert consumer.assigned == []
    clock.now += RECHECK_S
    feed.poll()  # still missing
    assert consumer.assigned == [] and feed.missing
    clock.now += RECHECK_S
    feed.poll()  # created meanwhile: read from its beginning
    assert [tp.topic for tp in consumer.assigned] == ["jobs.q.ordering"]
    assert not feed.missing and consumer.consumed == 1


def test_an_assignment_looks_for_the_lane_topic_again(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    feed = feed_with([False, True], clock, monkeypatch)
    feed.catch_up()
    assert feed.missing
    read: list[str] = []
    monkeypatch.setattr("leasekeeper.ordering_lane.read_to_end",
                        lambda consumer, tp, apply, timeout: read.append(tp.topic))  # fmt: skip
    feed.catch_up()  # a partition moved here after the topic was created
    assert read == ["jobs.q.ordering"] and not feed.missing
