"""The dashboard over HTTP, in process against the real broker: a path prefix, the
Host check and the access policy at the door, and the JSON API."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from devtools.waiting import wait_until
from jobcore.control import Cancellation
from jobcore.kafka import OFFSET_BEGINNING, KafkaSettings, TopicPartition, make_consumer
from jobcore.topic_admin import ensure_queue_topics
from jobcore.topics import QueueTopics
from leasekeeper.dashboard.access import AccessPolicy
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.hosts import HostCheck
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.server import Dashboard, DashboardServer
from schemas.codec import EnvelopeCodec, SchemaRegistry

pytestmark = pytest.mark.kafka
TOKEN = "t0ken"


@pytest.fixture
def base_url(kafka: KafkaSettings) -> Iterator[str]:
    dashboard = Dashboard(
        fleet=FleetState(),
        kafka=KafkaView(kafka, "jobs"),
        actions=Actions(kafka=kafka, prefix="jobs", codec=EnvelopeCodec(SchemaRegistry())),
        policy=AccessPolicy(token=TOKEN),
        base="/ops/jobs",
        hosts=HostCheck.of(["127.0.0.1", "Dash.Example"]),  # the --listen host, --allowed-host
    )
    server = DashboardServer(dashboard, "127.0.0.1", 0)
    server.start()
    yield f"http://127.0.0.1:{server.port}/ops/jobs"
    server.stop()


def fetch(url: str, method: str = "GET", **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(
        url, method=method, headers=headers, data=b"" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_pages_live_under_the_prefix_and_link_within_it(
    base_url: str, kafka: KafkaSettings, unique: str
) -> None:
    queue = f"http{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    status, page = fetch(f"{base_url}/leasekeepers")
    assert status == 200
    assert 'href="/ops/jobs/dlq"' in page and 'href="/ops/jobs/job"' in page
    status, page = fetch(f"{base_url}/queues/{queue}")
    assert status == 200 and f'href="/ops/jobs/dlq/{queue}"' in page
    status, api = fetch(f"{base_url}/api/job?id=nope&queue={queue}")
    assert status == 200 and json.loads(api)["state"] == "not found yet"


def test_writes_need_the_token_and_the_same_origin(base_url: str) -> None:
    replay = f"{base_url}/dlq/none-such/replay?mode=dry-run"
    assert fetch(replay, "POST", **{"Sec-Fetch-Site": "same-origin"})[0] == 403  # no token
    assert (
        fetch(replay, "POST", Authorization=f"Bearer {TOKEN}", **{"Sec-Fetch-Site": "cross-site"})[
            0
        ]
        == 403
    )
    assert fetch(replay, "GET")[0] == 404  # a write action is POST only
    assert fetch(f"{base_url}/", "DELETE")[0] == 403


def test_cancel_records_the_cancellation_on_the_control_topic(
    base_url: str, kafka: KafkaSettings, unique: str
) -> None:
    queue = f"cancel{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    url = f"{base_url}/job/cancel?queue={queue}&id=job-{unique}"
    assert fetch(url, "POST", **{"Sec-Fetch-Site": "same-origin"})[0] == 403  # no token
    status, page = fetch(url, "POST", Authorization=f"Bearer {TOKEN}")
    assert status == 200 and f"cancellation recorded for job-{unique}" in page

    consumer = make_consumer(kafka, f"check.{unique}")
    try:
        consumer.assign([TopicPartition(QueueTopics(queue=queue).control, 0, OFFSET_BEGINNING)])
        found: list[Cancellation] = []

        def recorded() -> bool:
            for message in consumer.consume(num_messages=10, timeout=0.5):
                value = message.value()
                if message.error() is None and value is not None:
                    found.append(Cancellation.decode(value))
            return bool(found)

        wait_until(recorded, 30, "the cancellation on the control topic")
    finally:
        consumer.close()
    assert found[0].job_id == f"job-{unique}" and "dashboard" in found[0].reason


def test_a_foreign_host_is_refused_whatever_the_request(base_url: str) -> None:
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 must read nothing,
    and not act either, even with the token."""
    evil = {"Host": "evil.example"}
    for path in ("/leasekeepers", "/dlq/none-such", "/api/job?id=x&queue=none-such"):
        status, body = fetch(f"{base_url}{path}", **evil)
        assert status == 403, path
        assert "'evil.example'" in body and "--allowed-host evil.example" in body
    replay = f"{base_url}/dlq/none-such/replay?mode=dry-run"
    assert fetch(replay, "POST", Authorization=f"Bearer {TOKEN}", **evil)[0] == 403
    cancel = f"{base_url}/job/cancel?queue=none-such&id=j"
    assert fetch(cancel, "POST", Authorization=f"Bearer {TOKEN}", **evil)[0] == 403
    assert fetch(f"{base_url}/leasekeepers", Host="evil.example:80")[0] == 403


def test_only_loopback_names_the_listen_host_and_allowed_hosts_are_answered(
    base_url: str,
) -> None:
    port = base_url.split(":")[2].split("/")[0]
    for host in (f"localhost:{port}", "127.0.0.1", f"[::1]:{port}", "[::1]", "LOCALHOST",
                 "dash.example", f"DASH.example:{port}"):  # fmt: skip
        status, page = fetch(f"{base_url}/leasekeepers", Host=host)
        assert status == 200 and "Leasekeepers" in page, host
    status, _ = fetch(f"{base_url}/api/none-such", Host=f"localhost:{port}")
    assert status == 404  # past the door: the API answers
    for host in ("127.0.0.1.evil.example", f"other.example:{port}", "[::2]"):
        assert fetch(f"{base_url}/leasekeepers", Host=host)[0] == 403, host
    status, body = fetch(f"{base_url}/leasekeepers", Host="[::1")
    assert status == 400 and "malformed Host" in body


def test_a_request_without_a_host_header_is_refused(base_url: str) -> None:
    port = int(base_url.split(":")[2].split("/")[0])
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest("GET", "/ops/jobs/leasekeepers", skip_host=True)
        connection.endheaders()
        response = connection.getresponse()
        assert response.status == 400 and b"no Host header" in response.read()
    finally:
        connection.close()
