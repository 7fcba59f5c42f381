"""Enqueue jobs: the API and CLI that append Avro-encoded jobs to Kafka."""
