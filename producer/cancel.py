"""``producer cancel``: record a cancellation and say which case applied.

See ``producer/status.py`` for what the answer rests on. Without a status topic
(a queue created before it existed) the answer is only that the cancellation
was recorded, which is all that can be known.
"""

from __future__ import annotations

from jobcore.control import JobEnd
from jobcore.kafka import KafkaException, KafkaSettings, make_admin
from jobcore.topics import QueueTopics
from producer.api import CancelError, JobProducer
from producer.status import CancelAnswer, CancelOutcome, StatusError, StatusReader, ended

# How long ``cancel`` waits for a leasekeeper to answer for the cancellation.
DEFAULT_WAIT_S = 10.0


def cancel_job(
    settings: KafkaSettings,
    producer: JobProducer,
    topics: QueueTopics,
    job_id: str,
    *,
    reason: str = "",
    wait_s: float = DEFAULT_WAIT_S,
) -> CancelAnswer:
    """Cancel ``job_id`` unless it already ended; wait up to ``wait_s`` for the answer.

    Raises CancelError when the cancellation was not recorded.
    """
    if not _has_status_topic(settings, topics):
        producer.record_cancellation(topics.queue, job_id, reason=reason)
        return CancelAnswer(job_id=job_id, outcome=CancelOutcome.RECORDED)
    try:
        reader = StatusReader(settings, topics.status)
    except KafkaException as exc:
        raise CancelError(f"cancelling job {job_id} was not recorded: {exc}") from exc
    with reader:
        try:
            before = reader.latest(job_id)
        except (KafkaException, StatusError) as exc:
            raise CancelError(f"cancelling job {job_id} was not recorded: {exc}") from exc
        if before is not None and before.state is not JobEnd.CANCELLED:
            return CancelAnswer(job_id=job_id, outcome=ended(before), status=before)
        producer.record_cancellation(topics.queue, job_id, reason=reason)
        if before is not None:  # cancelled before: the leasekeeper already answered
            return CancelAnswer(job_id=job_id, outcome=ended(before), status=before)
        try:
            after = reader.wait_for(job_id, wait_s)
        except (KafkaException, StatusError):  # recorded; only the answer is missing
            return CancelAnswer(job_id=job_id, outcome=CancelOutcome.RECORDED)
    if after is None:
        return CancelAnswer(job_id=job_id, outcome=CancelOutcome.NOT_FOUND)
    return CancelAnswer(job_id=job_id, outcome=ended(after), status=after)


def _has_status_topic(settings: KafkaSettings, topics: QueueTopics) -> bool:
    metadata = make_admin(settings).list_topics(topics.status, timeout=10)
    found = metadata.topics.get(topics.status)
    return found is not None and found.error is None and bool(found.partitions)
