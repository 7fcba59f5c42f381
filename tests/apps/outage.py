"""A worker app for the breaker's outage test: two job types, one of them needing a
dependency that is down for a while.

``storm_call`` calls the test's fake dependency (``$STORM_URL``) as the retry-storm
app does: a 503 is an ordinary, retryable failure, so only the breaker can stop
the attempts during the outage. ``noop`` needs nothing and records when it
started, so the test can tell whether the outage held it back. Successes and
starts are appended to ``$RECORDING_DIR`` as ``tests/apps/recording.py`` does.
"""

from __future__ import annotations

import time
from typing import Any

from tests.apps.storm import SCHEMAS, _append
from tests.apps.storm import storm_call as call_dependency
from workers import App, JobContext

app = App("outage")

__all__ = ["SCHEMAS", "app"]


@app.job("storm_call")
def storm_call(ctx: JobContext, payload: dict[str, Any]) -> None:
    call_dependency(ctx, payload)


@app.job("noop")
def noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    _append("starts", ctx.job_id, ctx.attempt, time.time())
    _append("runs", ctx.job_id, ctx.attempt, time.time())
