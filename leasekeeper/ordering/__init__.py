"""Per-key ordering: one job of a key at a time, in enqueue order; its lane on Kafka and its CLI."""
