"""``make bench``: our queue side by side with raw Kafka, share groups and the usual peers.

Every number in ``BENCHMARKS.md`` comes from ``python -m benchmarks``, which
starts what it needs on this machine, runs each scenario for a bounded time,
tears everything down and writes JSON plus one PNG per scenario to
``benchmarks/results/``.
"""
