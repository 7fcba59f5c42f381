"""The leasekeeper's Kafka side: the consumer loop, its commits, the senders of copies."""
