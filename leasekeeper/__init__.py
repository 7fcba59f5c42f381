"""The lease-tracking sidecar: consumes a queue's topics and leases jobs to workers."""
