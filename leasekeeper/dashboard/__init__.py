"""``leasekeeper dashboard``: a web page over Kafka and the leasekeepers' published snapshots."""
