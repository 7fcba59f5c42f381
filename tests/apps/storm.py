"""A worker app for the retry-storm test: each job makes one call to a fake dependency.

The dependency is an HTTP server in the test process (``$STORM_URL``). A 503 (down,
or over its capacity for this half second) fails the attempt with an ordinary,
retryable error, so the leasekeeper's retry policy alone decides when the job
calls again; that is what the test measures. A success is recorded in
``$RECORDING_DIR`` the way ``tests/apps/recording.py`` records runs, so the test
can tell when every job got through.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from workers import App, JobContext

app = App("storm")
SCHEMAS = Path(__file__).with_name("schemas")
# Short: the dependency answers at once or not at all. A slow answer would hold
# a worker thread and make the load the test sees depend on worker concurrency.
CALL_TIMEOUT_S = 2.0


class DependencyUnavailable(ConnectionError):
    """The dependency said 503: a transient failure that the retry policy retries."""


@app.job("storm_call")
def storm_call(ctx: JobContext, payload: dict[str, Any]) -> None:
    url = f"{os.environ['STORM_URL']}?job={ctx.job_id}&attempt={ctx.attempt}"
    try:
        with urllib.request.urlopen(url, timeout=CALL_TIMEOUT_S) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        # No Retry-After on purpose: it would bypass the jittered backoff under test.
        raise DependencyUnavailable(f"dependency answered {exc.code}") from None
    _append("runs", ctx.job_id, ctx.attempt, time.time())


def _append(kind: str, *fields: object) -> None:
    directory = Path(os.environ["RECORDING_DIR"])
    with (directory / f"{kind}-{os.getpid()}.log").open("a") as out:
        out.write(" ".join(str(f) for f in fields) + "\n")
