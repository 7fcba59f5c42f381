"""The example app under FastAPI's ``TestClient``, with eager mode: no Kafka.

The app gets the eager producer through its ``create_app`` factory; each receipt's
job has run (through the worker's real path) by the time the POST answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from examples.fastapi import jobs as receipts
from examples.fastapi.app import create_app
from jobtesting import Eager, EagerJobDead, eager
from schemas.codec import SchemaRegistry

RECEIPT = {"tenant": "acme", "order_id": 42, "email": "a@example.com", "amount_cents": 1999}


def client_for(jobs: Eager) -> TestClient:
    return TestClient(create_app(make_producer=lambda: jobs.producer))


@pytest.fixture
def jobs() -> Iterator[Eager]:
    # raise_dead=False: a dead job is reported by the status endpoint, as in production.
    with eager(receipts.app, registry=SchemaRegistry(), raise_dead=False) as queue:
        yield queue


@pytest.fixture
def client(jobs: Eager) -> Iterator[TestClient]:
    with client_for(jobs) as client:
        yield client


def test_a_receipt_has_been_sent_when_the_post_answers(client: TestClient, jobs: Eager) -> None:
    answer = client.post("/receipts", json=RECEIPT)
    assert answer.status_code == 202
    job_id = answer.json()["job_id"]
    sent = jobs.ran(type="send_receipt", tenant="acme", payload={"order_id": 42})
    assert [run.job_id for run in sent] == [job_id]
    assert sent[0].payload["currency"] == "EUR"
    status = client.get(answer.json()["status_url"])
    assert status.status_code == 200
    assert status.json() | {"job_id": None} == {
        "job_id": None,
        "state": "succeeded",
        "source": "eager mode",
        "attempt": 1,
        "reason": None,
        "last_error": None,
        "note": None,
    }


def test_a_payload_its_schema_refuses_is_a_422_naming_the_field(
    client: TestClient, jobs: Eager
) -> None:
    answer = client.post("/receipts", json={**RECEIPT, "amount_cents": 2**70})
    assert answer.status_code == 422
    assert "send_receipt payload" in answer.json()["detail"]
    assert "amount_cents" in answer.json()["detail"]
    assert jobs.runs == []


def test_a_receipt_for_a_bad_address_is_dead_and_its_status_says_why(
    client: TestClient, jobs: Eager
) -> None:
    answer = client.post("/receipts", json={**RECEIPT, "email": "nobody"})
    assert answer.status_code == 202
    status = client.get(answer.json()["status_url"]).json()
    assert (status["state"], status["reason"], status["attempt"]) == ("dead", "permanent error", 1)
    assert status["last_error"] == "Permanent: not an address: nobody"


def test_an_unknown_job_is_not_found(client: TestClient) -> None:
    status = client.get("/receipts/0123456789abcdef0123456789abcdef").json()
    assert status["state"] == "not found yet"


def test_by_default_a_dead_job_fails_the_request_so_a_test_cannot_miss_it() -> None:
    with (
        eager(receipts.app, registry=SchemaRegistry()) as jobs,
        client_for(jobs) as client,
        pytest.raises(EagerJobDead, match="permanent error"),
    ):
        client.post("/receipts", json={**RECEIPT, "email": "nobody"})
