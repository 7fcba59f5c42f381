"""The leasekeeper seen from outside: snapshots, ``inspect``, metrics and log lines."""
