"""The dashboard's DLQ pages against the real broker: a page of the newest dead
letters, older and newer links that neither skip nor repeat one, and every request
reading a bounded number of records instead of the whole topic."""

from __future__ import annotations

import html
import re
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from jobcore.kafka import KafkaSettings, make_producer
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.dashboard import actions as actions_module
from leasekeeper.dashboard.access import AccessPolicy
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.server import Dashboard, DashboardServer
from leasekeeper.dlq.entries import DeadLetterFilter
from leasekeeper.dlq.paging import MAX_CHUNKS, PAGE_SIZE, DlqPage, read_page
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import DeadLetter, Job

pytestmark = pytest.mark.kafka
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CODEC = EnvelopeCodec(SchemaRegistry())
PAYLOAD = CODEC.encode_payload(
    "send_receipt", {"order_id": 42, "email": "a@example.com", "amount_cents": 1999}
)


def plant(kafka: KafkaSettings, queue: str, count: int, partition_of: dict[int, int]) -> None:
    """Dead letters ``j000``... one a second from T0, on the partitions given (else 0)."""
    producer = make_producer(kafka)
    for i in range(count):
        died = T0 + 1000 * i
        tenant = "rare" if i == 0 else "acme"
        job = Job(job_id=f"j{i:03d}", queue=queue, tenant_id=tenant, type="send_receipt",
                  payload=PAYLOAD, attempt=1, max_attempts=1, created_at_ms=T0)  # fmt: skip
        letter = DeadLetter(envelope=CODEC.encode(job), reason="attempts exhausted",
                            detail="boom", source_topic=f"jobs.{queue}", source_partition=0,
                            source_offset=i, died_at_ms=died)  # fmt: skip
        producer.produce(
            QueueTopics(queue=queue).dlq,
            value=CODEC.encode_dead_letter(letter),
            partition=partition_of.get(i, 0),
            timestamp=died,
        )
    assert producer.flush(30) == 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[DlqPage]:
    """Every page the dashboard reads, with its count of records consumed."""
    pages: list[DlqPage] = []

    def counted(*args: object, **kwargs: object) -> DlqPage:
        page = read_page(*args, **kwargs)  # type: ignore[arg-type]
        pages.append(page)
        return page

    monkeypatch.setattr(actions_module, "read_page", counted, raising=False)
    return pages


@pytest.fixture
def base_url(kafka: KafkaSettings) -> Iterator[str]:
    dashboard = Dashboard(
        fleet=FleetState(),
        kafka=KafkaView(kafka, "jobs"),
        actions=Actions(kafka=kafka, prefix="jobs", codec=CODEC),
        policy=AccessPolicy(token=None),
    )
    server = DashboardServer(dashboard, "127.0.0.1", 0)
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        assert response.status == 200
        return str(response.read().decode())


def jobs_on(page: str) -> list[str]:
    return re.findall(r'/\d+/\d+">(j\d{3})</a>', page)


def link_of(page: str, name: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)" id="{name}">', page)
    return html.unescape(found.group(1)) if found else None


def names(first: int, last: int) -> list[str]:
    """Job ids from ``first`` down to ``last``, newest first."""
    return [f"j{i:03d}" for i in range(first, last - 1, -1)]


def test_the_dlq_page_shows_the_newest_50_and_links_older_and_newer_pages(
    kafka: KafkaSettings, unique: str, base_url: str, reads: list[DlqPage]
) -> None:
    queue = f"dlqpages{unique}"
    ensure_queue_topics(kafka, queue, partitions=2)
    # Every sixth dead letter on partition 1: a page merges both partitions by time.
    plant(kafka, queue, 120, {i: 1 for i in range(0, 120, 6)})
    bound = MAX_CHUNKS * PAGE_SIZE * 2

    first = get(f"{base_url}/dlq/{queue}")
    assert jobs_on(first) == names(119, 70)
    assert link_of(first, "newer") is None
    assert reads[-1].read < 120 and reads[-1].read <= bound  # not the whole topic

    older = link_of(first, "older")
    assert older is not None
    second = get(base_url + older)
    assert jobs_on(second) == names(69, 20)
    assert reads[-1].read < 120 and reads[-1].read <= bound

    third = get(f"{base_url}{link_of(second, 'older')}")
    assert jobs_on(third) == names(19, 0)
    assert link_of(third, "older") is None

    back = get(f"{base_url}{link_of(third, 'newer')}")
    assert jobs_on(back) == names(69, 20)
    assert "120 matching" not in first and 'id="replay-all">Replay all matching' in first

    one = re.search(rf'href="(/dlq/{queue}/\d+/\d+)">j119<', first)
    assert one is not None
    assert "Attempt history" in get(base_url + one.group(1))  # read by seeking to it
    with pytest.raises(urllib.error.HTTPError, match="404"):
        get(f"{base_url}/dlq/{queue}/0/100")  # past the partition's end


def test_a_sparse_filter_stops_each_page_at_its_read_budget_and_goes_on(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"dlqsparse{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    plant(kafka, queue, 100, {})
    rare = DeadLetterFilter(tenant="rare")  # only j000, the oldest, matches
    topic = QueueTopics(queue=queue).dlq

    page = read_page(kafka, topic, CODEC, rare, size=10)
    pages = [page]
    while page.older is not None:
        page = read_page(kafka, topic, CODEC, rare, before=page.older, size=10)
        pages.append(page)
    assert [len(p.entries) for p in pages] == [0, 0, 1]
    assert pages[-1].entries[0].job is not None and pages[-1].entries[0].job.job_id == "j000"
    assert [p.read for p in pages] == [MAX_CHUNKS * 10, MAX_CHUNKS * 10, 20]
    assert [p.cut_short for p in pages] == [True, True, False]
