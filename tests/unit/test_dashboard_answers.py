"""The dashboard when a request cannot be served: a mistyped queue or Kafka down gets
the dashboard's own page (navigation kept) with a sentence naming the problem,
``/api/...`` gets JSON with the same status, and no page shows ``KafkaError{``.

The unreachable cluster is a real client pointed at 127.0.0.1:1 (nothing listens
there); the mistyped queue needs only the names of the cluster's queues.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobcore.kafka import KafkaSettings
from leasekeeper.dashboard.access import AccessPolicy
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.server import Dashboard, DashboardServer
from schemas.codec import EnvelopeCodec, SchemaRegistry

NAVIGATION = ('href="/leasekeepers"', 'href="/dlq"', 'href="/scheduled"')


class Cluster:
    """Kafka as the dashboard sees it, with one queue, ``emails``."""

    bootstrap = "127.0.0.1:9092"

    def topics(self) -> dict[str, int]:
        return {"jobs.emails": 1, "jobs.emails.dlq": 1}

    def queues(self) -> list[str]:
        return ["emails"]


def serve(kafka: Any, settings: KafkaSettings) -> Iterator[str]:
    dashboard = Dashboard(
        fleet=FleetState(),
        kafka=kafka,
        actions=Actions(kafka=settings, prefix="jobs", codec=EnvelopeCodec(SchemaRegistry())),
        policy=AccessPolicy(token=None),
    )
    server = DashboardServer(dashboard, "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


@pytest.fixture
def with_one_queue() -> Iterator[str]:
    yield from serve(Cluster(), KafkaSettings(bootstrap=Cluster.bootstrap))


@pytest.fixture
def with_kafka_down() -> Iterator[str]:
    settings = KafkaSettings(bootstrap="127.0.0.1:1", client_id="dashboard-test")
    yield from serve(KafkaView(settings, "jobs", timeout_s=1.0), settings)


def fetch(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def assert_page(answer: tuple[int, str, str], status: int, sentence: str) -> None:
    code, kind, body = answer
    assert code == status, body
    assert kind.startswith("text/html")
    assert all(link in body for link in NAVIGATION), body
    assert sentence in body and "KafkaError{" not in body


@pytest.mark.parametrize("path", ["/queues/emials", "/dlq/emials", "/dlq/emials/0/3"])
def test_a_mistyped_queue_gets_a_page_that_says_so(with_one_queue: str, path: str) -> None:
    answer = fetch(with_one_queue + path)
    assert_page(answer, 404, "There is no queue &#x27;emials&#x27; in this cluster")
    assert "the queues are: emails" in answer[2]


def test_an_api_error_is_json_with_its_status(with_one_queue: str) -> None:
    code, kind, body = fetch(with_one_queue + "/api/nothing-here")
    assert code == 404 and kind == "application/json"
    assert json.loads(body) == {"error": "no such page", "status": 404}


def test_kafka_down_gets_pages_that_say_so_and_json_for_the_api(with_kafka_down: str) -> None:
    sentence = "Kafka at 127.0.0.1:1 does not answer"
    for path in ("/", "/leasekeepers", "/queues/emails", "/scheduled", "/dlq"):
        assert_page(fetch(with_kafka_down + path), 503, sentence)
    code, kind, body = fetch(with_kafka_down + "/api/overview")
    assert code == 503 and kind == "application/json"
    error = json.loads(body)
    assert error["status"] == 503 and sentence in error["error"]
    assert "KafkaError{" not in error["error"]


def test_a_malformed_queue_name_never_ends_the_status_index_s_reader(tmp_path: Path) -> None:
    """A name asked for through the Job page once reached the index's thread, whose
    ValueError ended it for good (every later lookup of a finished job then failed)."""
    from leasekeeper.dashboard.status_index import StatusIndex

    class Ends:
        def __init__(self) -> None:
            self.assigned: list[Any] = []

        def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
            return 0, 0

        def incremental_assign(self, parts: list[Any]) -> None:
            self.assigned.extend(p.topic for p in parts)

    index = StatusIndex(KafkaSettings(bootstrap="127.0.0.1:1"), "jobs", tmp_path / "index",
                        live_queues=lambda: ["orders"])  # fmt: skip
    try:
        index.want("no/such")
        consumer = Ends()
        index._follow_new(consumer)  # type: ignore[arg-type]
        assert "no/such" not in index._wanted
        assert consumer.assigned == ["jobs.orders.status"]  # the others still followed
    finally:
        index._db.close()
