"""Worker runtime: handler registry, concurrency, heartbeats, timeouts."""
