"""``JobProducer.status`` through the dashboard's API: a fake dashboard on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jobcore.kafka import KafkaSettings
from producer.lookup import NOT_FOUND, NOT_SEEN, JobLookupError, lookup

ANSWERS = {
    "running": {"job_id": "running", "state": "leased", "queue": "q", "worker": "w-1",
                "attempt": 2, "reason": None, "at_ms": None},
    "gone": {"job_id": "gone", "state": "dead", "queue": "q", "worker": None,
             "attempt": 8, "reason": "max_attempts", "at_ms": 1_700_000_000_000},
}  # fmt: skip


class _Fake(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        job_id = self.path.split("id=")[1].split("&")[0]
        body = json.dumps(ANSWERS.get(job_id, {"job_id": job_id, "state": NOT_FOUND})).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def dashboard() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


SETTINGS = KafkaSettings(bootstrap="127.0.0.1:1")  # never used: the dashboard answers


def test_a_leased_job_names_its_worker_and_the_source(dashboard: str) -> None:
    found = lookup(SETTINGS, "q", "running", prefix="jobs", dashboard=dashboard)
    assert (found.state, found.worker, found.attempt) == ("leased", "w-1", 2)
    assert found.source == f"dashboard {dashboard}" and not found.finished


def test_a_dead_job_says_why(dashboard: str) -> None:
    found = lookup(SETTINGS, "q", "gone", prefix="jobs", dashboard=dashboard)
    assert (found.state, found.reason, found.finished) == ("dead", "max_attempts", True)


def test_an_unknown_job_is_reported_honestly(dashboard: str) -> None:
    unknown = lookup(SETTINGS, "q", "new", prefix="jobs", dashboard=dashboard)
    assert unknown.state == NOT_FOUND
    seen_late = lookup(SETTINGS, "q", "new", prefix="jobs", dashboard=dashboard, enqueued_at_ms=5)
    assert seen_late.state == NOT_SEEN


def test_an_unreachable_dashboard_is_one_clear_error() -> None:
    with pytest.raises(JobLookupError, match=r"cannot ask the dashboard at http://127\.0\.0\.1:1"):
        lookup(SETTINGS, "q", "x", prefix="jobs", dashboard="http://127.0.0.1:1")
