"""Queue topic creation, for producer callers: it lives in ``jobcore.topic_admin``."""

from jobcore.topic_admin import (
    CONTROL_RETENTION_MS,
    DLQ_RETENTION_MS,
    STATUS_RETENTION_MS,
    ensure_queue_topics,
)

__all__ = ["CONTROL_RETENTION_MS", "DLQ_RETENTION_MS", "STATUS_RETENTION_MS", "ensure_queue_topics"]
