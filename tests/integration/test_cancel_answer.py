"""``JobProducer.cancel`` says which case applied, as the README says it does and as
``producer cancel`` prints: here, with no leasekeeper to answer, "not found yet"."""

from __future__ import annotations

from jobcore.kafka import KafkaSettings
from producer import JobProducer, ensure_queue_topics
from producer.status import CancelAnswer, CancelOutcome


def test_cancel_returns_which_case_applied(kafka: KafkaSettings, unique: str) -> None:
    queue = f"q{unique}"
    ensure_queue_topics(kafka, queue, partitions=1)
    with JobProducer(kafka) as producer:
        answer = producer.cancel(queue, "a-job-nobody-enqueued", wait_s=0.5)
    assert isinstance(answer, CancelAnswer)
    assert answer.outcome is CancelOutcome.NOT_FOUND and answer.exit_code == 6
    assert "not found yet: cancellation recorded" in answer.message(str)
