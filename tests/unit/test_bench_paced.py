"""The paced load generator stops at its ``limit``: the latency scenario's paced warm-up
must send exactly the jobs its workers were told not to measure."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from benchmarks.load import Preloader


class RecordingProducer:
    """Delivers every job at once; keeps the payloads it was given."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []

    def enqueue_nowait(
        self, queue: str, type: str, payload: dict[str, Any], **_: Any
    ) -> Future[str]:
        self.payloads.append(payload)
        future: Future[str] = Future()
        future.set_result(f"job-{payload['n']}")
        return future

    def flush(self, timeout: float) -> None:
        pass


def preloader(producer: RecordingProducer) -> Preloader:
    loader = Preloader.__new__(Preloader)  # no Kafka: only the pacing is under test
    loader.queue, loader.ordering_keys, loader.tenants, loader.blob = "q", 0, 3, ""
    loader.producer = producer  # type: ignore[assignment]
    loader.loaded = 0
    return loader


def test_a_paced_load_stops_at_its_limit_and_numbers_on_from_there() -> None:
    producer = RecordingProducer()
    loader = preloader(producer)
    warm = loader.paced(100_000.0, 30.0, limit=37)  # the limit, long before the 30 s
    assert len(warm) == 37
    assert loader.loaded == 37
    more = loader.paced(100_000.0, 0.05, limit=5)
    assert more == [f"job-{n}" for n in range(37, 42)]
    assert [p["n"] for p in producer.payloads] == list(range(42))
