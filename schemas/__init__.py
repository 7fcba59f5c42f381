"""Avro schemas for the job envelope and payloads, and the worker RPC definition."""
