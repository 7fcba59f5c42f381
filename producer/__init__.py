"""Enqueue jobs: the API and CLI that append Avro-encoded jobs to Kafka."""

from jobcore.topic_admin import ensure_queue_topics
from producer.api import CancelError, EnqueueError, JobProducer
from producer.flood import FloodPolicy
from producer.request import MAX_DELAY, EnqueueOptions, JobRequest
from producer.results import JobCancelled, JobDied, JobUnknown, ResultError, ResultTimeout
from schemas.codec import PayloadError

__all__ = [
    "MAX_DELAY",
    "CancelError",
    "EnqueueError",
    "EnqueueOptions",
    "FloodPolicy",
    "JobCancelled",
    "JobDied",
    "JobProducer",
    "JobRequest",
    "JobUnknown",
    "PayloadError",
    "ResultError",
    "ResultTimeout",
    "ensure_queue_topics",
]
