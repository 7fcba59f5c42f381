"""Enqueue jobs: the API and CLI that append Avro-encoded jobs to Kafka."""

from producer.admin import ensure_queue_topics
from producer.api import EnqueueError, JobProducer
from producer.request import JobRequest
from schemas.codec import PayloadError

__all__ = ["EnqueueError", "JobProducer", "JobRequest", "PayloadError", "ensure_queue_topics"]
