"""The lease core: the leasekeeper's state machine and what it remembers, free of Kafka and gRPC."""
