"""Ctrl-C during ``producer enqueue`` says whether the job was sent.

Enqueueing again after a job that did go out runs it twice; not enqueueing
again after one that did not loses it. Kafka is replaced by a producer whose
acknowledgement the test gives or withholds.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from click.testing import CliRunner

from producer import sending
from producer.api import EnqueueError, JobProducer
from producer.cli import main

ARGS = ["enqueue", "--queue", "emails", "noop", "--tenant", "acme", "--payload", "{}",
        "--bootstrap", "127.0.0.1:1"]  # fmt: skip
JOB_ID = "0123456789abcdef0123456789abcdef"


class Waiting(Future[str]):
    """The acknowledgement the person gave up waiting for: Ctrl-C while in ``result``."""

    def result(self, timeout: float | None = None) -> str:
        if not self.done():
            raise KeyboardInterrupt
        return super().result(timeout)


def fake_producer(monkeypatch: pytest.MonkeyPatch, delivered: bool) -> None:
    future = Waiting()

    def close(self: JobProducer, timeout: float = 30) -> None:
        # What closing does with a buffered job: delivers it, or gives up on it.
        if delivered:
            future.set_result(JOB_ID)
        else:
            future.set_exception(EnqueueError("purged", failures={JOB_ID: "purged"}))
            raise EnqueueError("closed with 1 jobs undelivered after 30s")

    monkeypatch.setattr(JobProducer, "__init__", lambda self, *a, **k: None)
    monkeypatch.setattr(JobProducer, "enqueue_nowait", lambda self, request: future)
    monkeypatch.setattr(JobProducer, "close", close)
    monkeypatch.setattr(sending, "require_kafka", lambda settings, timeout: None)


def run() -> Any:
    return CliRunner().invoke(main, ARGS)


def test_ctrl_c_after_kafka_acknowledged_says_the_job_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_producer(monkeypatch, delivered=True)
    result = run()
    assert result.exit_code == 130
    assert f"Kafka had acknowledged job {JOB_ID}: it was sent" in result.output


def test_ctrl_c_when_the_job_never_left_says_it_was_probably_not_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_producer(monkeypatch, delivered=False)
    result = run()
    assert result.exit_code == 130
    assert f"before Kafka acknowledged {JOB_ID}: it was probably not sent" in result.output


def test_ctrl_c_before_the_job_was_handed_over_says_it_was_not_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interrupted(settings: object, timeout: float) -> None:
        raise KeyboardInterrupt

    fake_producer(monkeypatch, delivered=True)
    monkeypatch.setattr(sending, "require_kafka", interrupted)
    result = run()
    assert result.exit_code == 130
    assert "before the job was handed to Kafka: it was not sent" in result.output
