"""Transactional enqueue through an outbox table in PostgreSQL.

``stage`` writes a job into ``job_outbox`` in the caller's own transaction, so it
exists exactly when the business data does; ``producer outbox relay`` moves
committed rows to Kafka. Needs psycopg 3 (``pip install 'kafka-lease-queue[outbox]'``).
"""

from producer.outbox.failures import OnDead
from producer.outbox.relay import OutboxRelay, OutboxStats, RelayConfig
from producer.outbox.schema import SCHEMA_SQL, init_schema
from producer.outbox.staging import Outbox, StagedJob, raw_connection, stage, stage_many

__all__ = [
    "SCHEMA_SQL",
    "OnDead",
    "Outbox",
    "OutboxRelay",
    "OutboxStats",
    "RelayConfig",
    "StagedJob",
    "init_schema",
    "raw_connection",
    "stage",
    "stage_many",
]
