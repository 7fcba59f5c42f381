"""The queues users would pick instead (Celery and Dramatiq on Redis, a Postgres queue).

Each peer module has a worker side (imported by the peer's own worker
processes) and a harness side (load, start, drain, stop).
"""
