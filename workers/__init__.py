"""Worker runtime: handler registry, concurrency, heartbeats, timeouts, graceful shutdown.

A worker module needs only what is exported here::

    from workers import App, DependencyDown, JobContext, Permanent, Retry
"""

from workers.app import App
from workers.context import JobContext
from workers.errors import DependencyDown, Permanent, Retry
from workers.middleware import JobResult, Middleware, Outcome

__all__ = [
    "App",
    "DependencyDown",
    "JobContext",
    "JobResult",
    "Middleware",
    "Outcome",
    "Permanent",
    "Retry",
]
