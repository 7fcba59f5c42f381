"""The plugin's ``jobs_eager(app)`` marker: code under test that builds its own
``JobProducer`` deep inside (as a web app's module-level producer does) has its jobs
run inline, with no Kafka and no change to that code; unmarked tests keep Kafka."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobcore.kafka import KafkaSettings
from jobtesting import Eager
from producer import JobProducer, PayloadError
from producer.transport import installed_transport
from workers import App, JobContext

ROOT = Path(__file__).resolve().parents[2]
app = App("shop")
sent: list[dict[str, Any]] = []


@app.job("send_receipt")
def send_receipt(ctx: JobContext, order: dict[str, Any]) -> None:
    sent.append(order)


def checkout(order_id: int) -> str:
    """The code under test: it makes its own producer, as production code does."""
    with JobProducer(KafkaSettings(bootstrap="127.0.0.1:1")) as producer:
        order = {"order_id": order_id, "email": "a@example.com", "amount_cents": 1999}
        return producer.enqueue("emails", "send_receipt", order, tenant_id="acme")


@pytest.mark.jobs_eager(app)
def test_a_producer_made_deep_inside_runs_its_jobs_inline(eager_jobs: Eager) -> None:
    sent.clear()
    job_id = checkout(42)
    assert [order["order_id"] for order in sent] == [42]
    [run] = eager_jobs.ran(type="send_receipt", tenant="acme")
    assert run.job_id == job_id and run.succeeded


@pytest.mark.jobs_eager(app)
def test_the_producer_made_inside_validates_as_the_real_one(eager_jobs: Eager) -> None:
    with pytest.raises(PayloadError):
        JobProducer(KafkaSettings(bootstrap="127.0.0.1:1")).enqueue(
            "emails", "send_receipt", {"order_id": "not a number"}, tenant_id="acme"
        )
    assert eager_jobs.runs == []


@pytest.mark.jobs_eager(app)
def test_closing_a_lent_transport_leaves_it_to_the_next_producer(eager_jobs: Eager) -> None:
    sent.clear()
    checkout(1)
    checkout(2)
    assert [order["order_id"] for order in sent] == [1, 2]


def test_an_unmarked_test_installs_nothing() -> None:
    assert installed_transport() is None


def test_eager_jobs_without_the_marker_says_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "test_unmarked.py").write_text("def test_x(eager_jobs):\n    pass\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "jobtesting.plugin", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert run.returncode != 0, run.stdout
    assert "eager_jobs needs the test marked @pytest.mark.jobs_eager(app)" in run.stdout
