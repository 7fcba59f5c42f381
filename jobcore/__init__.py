"""Code shared by producer, leasekeeper and workers: config, topic names, the Kafka adapter."""
