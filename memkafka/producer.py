"""A producer over the in-memory cluster: records land at once, their delivery
reports are served by ``poll``/``flush`` as librdkafka serves them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from jobcore.kafka import KafkaError, KafkaException
from memkafka.cluster import Cluster, unknown
from memkafka.records import Headers, MemoryMessage, partition_of

__all__ = ["MemoryProducer", "as_bytes", "as_headers"]

Report = Callable[[KafkaError | None, MemoryMessage], None]


def as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def as_headers(headers: Headers | Mapping[str, Any] | None) -> Headers | None:
    """A list of (name, bytes) pairs, as a consumer reads them back."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(name, as_bytes(value) or b"") for name, value in pairs]


class MemoryProducer:
    def __init__(self, cluster: Cluster, config: dict[str, Any]) -> None:
        self._cluster = cluster
        self._config = config
        self._default_report: Report | None = config.get("on_delivery")
        self._reports: list[tuple[Report, KafkaError | None, MemoryMessage]] = []
        self._lock = threading.Lock()

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        on_delivery: Report | None = None,
        callback: Report | None = None,
        timestamp: int = 0,
        headers: Headers | Mapping[str, Any] | None = None,
    ) -> None:
        report = on_delivery or callback or self._default_report
        key_bytes, value_bytes, pairs = as_bytes(key), as_bytes(value), as_headers(headers)
        fault = self._cluster.take_fault(topic)
        error: KafkaError | None = None
        offset: int | None = None
        with self._cluster.lock:
            logs = self._cluster.partitions(topic)
            if fault is not None:
                error = KafkaError(fault.code)
                if fault.raised:
                    raise KafkaException(error)
            elif logs is None:
                error = unknown(topic)
            else:
                if partition < 0:
                    partition = partition_of(key_bytes, len(logs), self._cluster.rng)
                if partition >= len(logs):
                    error = KafkaError(KafkaError._UNKNOWN_PARTITION)
                else:
                    offset = self._cluster.append(topic, partition, key_bytes, value_bytes,
                                                  pairs, timestamp)  # fmt: skip
        if report is not None:
            message = MemoryMessage(topic, max(partition, -1), offset, key=key_bytes,
                                    value=value_bytes, headers=pairs, error=error)  # fmt: skip
            with self._lock:
                self._reports.append((report, error, message))

    def poll(self, timeout: float | None = None) -> int:
        """Serve the delivery reports due (all of them: every record is already written)."""
        with self._lock:
            reports, self._reports = self._reports, []
        for report, error, message in reports:
            report(error, message)
        return len(reports)

    def flush(self, timeout: float | None = None) -> int:
        self.poll(0)
        return 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._reports)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        with self._lock:
            self._reports = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        from memkafka.admin import metadata

        return metadata(self._cluster, topic)
