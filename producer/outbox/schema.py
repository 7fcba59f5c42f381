"""The ``job_outbox`` table, its index and its NOTIFY trigger (``schema.sql``)."""

from __future__ import annotations

from importlib.resources import files

import psycopg

__all__ = ["SCHEMA_SQL", "init_schema"]

# Shipped as a file too, for people who run their own migration tool.
SCHEMA_SQL = files("producer.outbox").joinpath("schema.sql").read_text(encoding="utf-8")


def init_schema(dsn: str) -> None:
    """Create (or bring up to date) the outbox table; safe to run again."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA_SQL.encode())
